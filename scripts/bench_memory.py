"""Measured peak memory of one RL step on this CPU against ``hindsight memory``'s estimate.

A tiny backbone large enough that its tensors dominate the process (about 25M parameters:
400 MB of weights, AdamW states and reference) takes one GRPO step from random weights in a
fresh process; the peak resident set minus the resident set before the model existed is
compared with :func:`trainer.memory.plan_memory`'s peak for the same config.  Prints both,
their ratio and the parts; exits 1 when they differ by more than ``--tolerance`` (25%).

    python scripts/bench_memory.py [--set KEY=VALUE ...] [--tolerance 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = [
    "model.tiny={hidden_size: 512, num_layers: 8, num_heads: 8, num_kv_heads: 4, intermediate_size: 1408, "
    "vocab_size: 2048, max_position_embeddings: 4096}",
    "model.max_prompt_tokens=1024", "env.name=household", "env.context=full", "rollout.tasks_per_step=4",
    "rollout.group_size=4", "rollout.max_new_tokens=48", "algo.micro_batch_size=4", "algo.minibatch_size=0",
    "stages.warm_start.enabled=false", "stages.rl.steps=1", "algo.kl_coef=0.01",
]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(overrides: list[str], out: str) -> dict:
    """In this process: one RL step of the config; the resident-set growth it caused."""
    import torch

    from trainer.run.components import build_components, env_factory, start_rl
    from trainer.run.memory import plan_memory
    from trainer.run.resolve import load_config, resolve
    from trainer.stages.rl import PhaseTimer, collect_batch, update

    torch.set_num_threads(1)
    micro = ROOT / "tests" / "support" / "data" / "train_micro.yaml"
    cfg = resolve(load_config(micro, [*overrides, f"output.dir={out}"]))
    env_factory(cfg)().panel(cfg.env.train_split)  # the env's own memory before the baseline
    before = _rss_bytes()
    ctx = build_components(cfg)
    start_rl(ctx)
    batch = collect_batch(ctx, 1, PhaseTimer())
    update(ctx, batch, 1, PhaseTimer())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    plan = plan_memory(cfg, device_gib=24.0)
    return {"measured": peak - before, "estimate": plan.peak, "params": plan.arch.params,
            "parts": {p.name: p.bytes for p in plan.parts}, "phase": plan.peak_phase}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    overrides = BENCH + args.overrides + ["model.device=cpu", "model.dtype=float32"]
    if args.child:
        with tempfile.TemporaryDirectory() as out:
            print(json.dumps(measure(overrides, out)))
        return 0
    # glibc keeps freed blocks under its mmap threshold in the heap, so the resident set would
    # count memory the program has freed; with a 64 KiB threshold every tensor of note is its
    # own mapping, returned when freed, and the resident set follows the live tensors (as the
    # CUDA allocator's max_memory_allocated does on a GPU).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1",
           "MALLOC_MMAP_THRESHOLD_": "65536"}
    child = [sys.executable, __file__, "--child", *[a for o in args.overrides for a in ("--set", o)]]
    done = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.splitlines()[-1])
    mib = 2**20
    print(f"backbone: tiny, {result['params'] / 1e6:.1f}M parameters, one GRPO step on CPU (float32)")
    for name, value in result["parts"].items():
        print(f"  {name}: {value / mib:.0f} MiB")
    ratio = result["measured"] / result["estimate"]
    print(f"estimate (peak, {result['phase']}): {result['estimate'] / mib:.0f} MiB")
    print(f"measured (peak resident set growth): {result['measured'] / mib:.0f} MiB")
    print(f"measured / estimate: {ratio:.2f} (tolerance +-{args.tolerance:.0%})")
    return 0 if abs(ratio - 1) <= args.tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
