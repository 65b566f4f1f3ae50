"""Float32 bytes allocated while the KL reference is copied from a float32-master policy that
computes in bfloat16 (trainer.models.precision.frozen_copy), at a paper shape: the old deep
copy then cast allocated a whole second float32 model; the copy built tensor by tensor none.

    python scripts/bench_frozen_copy.py [qwen2.5-0.5b-shape]
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2ForCausalLM

from trainer.models.paper_shapes import shape_config
from trainer.models.precision import frozen_copy, set_compute_dtype


class Allocated(TorchDispatchMode):
    """Bytes of every new (non-view) tensor an operator returns, by dtype."""

    def __init__(self):
        super().__init__()
        self.bytes: dict[torch.dtype, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.data_ptr() for t in (*args, *(kwargs or {}).values()) if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and not t._is_view() and t.data_ptr() not in inputs:
                self.bytes[t.dtype] = self.bytes.get(t.dtype, 0) + t.numel() * t.element_size()
        return out


def main(backbone: str = "qwen2.5-0.5b-shape") -> None:
    with torch.device("cpu"):
        model = set_compute_dtype(Qwen2ForCausalLM(shape_config(backbone)).float(), torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    start = time.perf_counter()
    with Allocated() as probe:
        frozen_copy(model)
    gib = {str(k).removeprefix("torch."): round(v / 2**30, 3) for k, v in probe.bytes.items()}
    print(f"{backbone}: {params / 1e9:.2f}B parameters, copy allocated {gib} GiB "
          f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(*sys.argv[1:])
