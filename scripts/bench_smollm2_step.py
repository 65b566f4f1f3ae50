"""One RL step of SmolLM2-135M-Instruct on CPU, phase by phase, for each way to run it.

Sizes the SmolLM2 reference study (examples/cpu_reference_smollm2.yaml): the options it
chooses between are the rollout engine (``model.backend``: the transformers backend or the
vLLM CPU engine) and the update (LoRA adapters, ``model.lora.rank`` 8, or full fine-tuning,
rank 0).  Every option starts from the same policy, the bundled face-down warm start
(``ezpoints-smollm2-hidden``; for full fine-tuning its adapter folded into the base), plays
the same tasks with the same seed and takes one step of ``--method`` (default GRPO; SEED
and ETRO add their write and teacher phases).  Printed: wall seconds of each phase
(``rollout``, ``score``, ``update``...), the step, and the update's seconds per thousand
trained tokens, so that the options compare on their own work even where their rollouts
differ in length.  Run it alone (wall clock; the vLLM engine runs in its own process):

    OMP_NUM_THREADS=2 .venv-vllm/bin/python scripts/bench_smollm2_step.py [--threads 2]
        [--options vllm:8,transformers:8,vllm:0] [--method grpo] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from bench_trainer import step_seconds  # scripts/ is on sys.path when a script runs

from trainer.config import apply_overrides
from trainer.models.backbones import load_pretrained
from trainer.run.checkpoint import save_model
from trainer.run.resolve import load_config, resolve
from trainer.stages.warm_start import bundle_path

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "ezpoints_smollm2_hidden.yaml"


def merged_warm_start(bundle: Path, folder: Path) -> str:
    """The bundle's adapter folded into the base, saved as a plain model: full fine-tuning
    starts from the same policy as LoRA."""
    model, tokenizer = load_pretrained(str(bundle), torch.float32, "cpu", master=False)
    save_model(model, tokenizer, folder)
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--options", default="vllm:8,transformers:8,vllm:0",
                        help="backend:lora_rank pairs (rank 0 = full fine-tuning)")
    parser.add_argument("--method", default="grpo")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one option, print JSON
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = load_config(CONFIG, ["model.device=cpu", "stages.warm_start.enabled=false", "model.vllm.kv_cache_gb=1",
                                *args.overrides])
    bundle = bundle_path(resolve(load_config(CONFIG)).stages.warm_start.checkpoint)
    if args.one:
        option, tmp = args.one.split("@")
        backend, rank = option.split(":")
        cfg = apply_overrides(base, [f"model.backend={backend}", f"model.lora.rank={rank}",
                                     f"output.dir={tmp}/{backend}-{rank}"])
        init = str(bundle) if int(rank) else merged_warm_start(bundle, Path(tmp) / f"merged-{backend}")
        seconds, phases, tokens_per_s = step_seconds(cfg, args.method, init, repeats=1)
        generated = round(tokens_per_s * phases.get("rollout", 0.0))  # the tokens the update trains on
        print("RESULT " + json.dumps({"phases": phases, "seconds": seconds, "trained": generated}))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-smollm2-") as tmp:
        for option in args.options.split(","):
            # each option in a process of its own: one vLLM engine a process, and no memory of
            # the previous option's engine or model in the next one's figures
            out = subprocess.run([sys.executable, __file__, "--one", f"{option}@{tmp}", "--method", args.method,
                                  "--threads", str(args.threads), *(f"--set={o}" for o in args.overrides)],
                                 check=True, capture_output=True, text=True).stdout
            rows.append((option, json.loads(out.rsplit("RESULT ", 1)[1])))
    cfg = resolve(base)
    print(f"one {args.method} step of {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} trajectories, "
          f"{CONFIG.name}, warm start {bundle.name}, {args.threads} threads, wall seconds")
    for option, r in rows:
        detail = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["phases"].items()) if v >= 0.05)
        per_k = r["phases"].get("update", 0.0) / max(r["trained"], 1) * 1000
        print(f"{option:15s} step {r['seconds']:7.1f}s  update {per_k:5.2f}s per 1k generated tokens "
              f"({r['trained']} tokens)  [{detail}]", flush=True)


if __name__ == "__main__":
    main()
