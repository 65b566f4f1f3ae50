"""Memory handed over between the trainer and a colocated engine (DESIGN.md, Memory hand-over
on a GPU): what PyTorch caches is given back to the driver before the engine takes it.
"""

from __future__ import annotations

import gc

import torch


def free_cached_memory() -> None:
    """Give the blocks PyTorch's caching allocator keeps reserved back to the driver.

    A vLLM engine wakes up (``wake_up``) by mapping memory from the driver, outside PyTorch's
    allocator, so the gradients and activations an update freed stay reserved by PyTorch and
    out of the engine's reach until ``torch.cuda.empty_cache()`` releases them; the garbage
    collector runs first so that tensors held only by reference cycles are freed too.  TRL
    calls it before every ``wake_up`` (``trl/generation/vllm_generation.py``), verl before it
    wakes the weights and again before the KV cache (``verl/workers/fsdp_workers.py``).
    Nothing else happens without CUDA."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
