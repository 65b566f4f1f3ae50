"""Measured peak memory of the score, update and Stage 1 phases on this CPU against ``hindsight memory``.

A tiny backbone large enough that its tensors dominate the process (about 25M parameters:
400 MB of weights, AdamW states and reference) runs SEED's Stage 1 (oracle annotations,
two epochs) and two RL steps in a fresh process.  Each phase's peak resident set (the
kernel's high-water mark, reset at the phase's start through ``/proc/self/clear_refs``)
minus the process's own (its resident set less its tensors: after start-up for Stage 1, at
the second RL step's start for score and update, so that the run's Python objects count as
the process's) is set
against that phase's estimate,
:func:`trainer.run.memory.plan_memory`'s ``phase(...)`` less the process's own part (the
baseline removes it).  Stage 1 is measured over :func:`~trainer.stages.skill_sft.skill_sft`
(its rollouts are far smaller than its training), score over the score, reference and teacher
passes, update over the whole update, both in the second RL step: AdamW's moments exist from
the first optimizer step on, as in every step of a run but the first.  Prints the three
(estimate, measured, ratio) and the parts; exits 1 when a ratio is off by more than
``--tolerance`` (25%).

    python scripts/bench_memory.py [--set KEY=VALUE ...] [--tolerance 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = [
    "model.tiny={hidden_size: 512, num_layers: 8, num_heads: 8, num_kv_heads: 4, intermediate_size: 1408, "
    "vocab_size: 2048, max_position_embeddings: 4096}",
    "model.max_prompt_tokens=1024", "env.name=household", "env.context=full", "env.max_turns=10",
    "rollout.tasks_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=48", "algo.micro_batch_size=4",
    "algo.minibatch_size=0", "algo.kl_coef=0.01", "algo.method=seed", "writer.kind=oracle",
    "writer.max_new_tokens=160", "stages.warm_start.enabled=false", "stages.skill_sft.enabled=true",
    "stages.skill_sft.tasks=3", "stages.skill_sft.rollouts_per_task=2", "stages.skill_sft.epochs=2",
    "stages.skill_sft.batch_size=4", "stages.rl.steps=2",
]
MEASURED = ("stage1", "score", "update")


def _status(key: str) -> int:
    """A /proc/self/status figure in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"{key}:\s+(\d+)", f.read()).group(1)) * 1024


def _reset_peak() -> None:
    """Restart the kernel's high-water mark of this process's resident set at its current size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class Peaks:
    """Each phase's peak resident set, phases nested or not: entering one folds the high-water
    mark so far into every open phase before restarting it."""

    def __init__(self):
        self.peaks: dict[str, int] = {}
        self._open: list[str] = []

    def _fold(self) -> None:
        peak = _status("VmHWM")
        for phase in self._open:
            self.peaks[phase] = max(self.peaks.get(phase, 0), peak)

    @contextmanager
    def __call__(self, phase: str):
        self._fold()
        _reset_peak()
        self._open.append(phase)
        try:
            yield
        finally:
            self._fold()
            self._open.pop()


def _resident_tensors(ctx) -> int:
    """Bytes of the tensors the plan counts as the run's state: the policy's parameters,
    buffers and gradients, the optimizer's states and the frozen reference."""
    import torch

    tensors = [*ctx.model.parameters(), *ctx.model.buffers()]
    tensors += [p.grad for p in ctx.model.parameters() if p.grad is not None]
    if ctx.optimizer is not None:
        tensors += [v for state in ctx.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    if ctx.reference is not None:
        tensors += [*ctx.reference.parameters(), *ctx.reference.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(overrides: list[str], out: str) -> dict:
    """In this process: Stage 1 and two RL steps of the config; each measured phase's peak
    resident-set growth over the process before the model, and the plan."""
    import torch

    from trainer.run.components import build_components, env_factory, start_rl
    from trainer.run.memory import CPU_RUNTIME_GIB, GIB, plan_memory
    from trainer.run.resolve import load_config, resolve
    from trainer.stages.rl import PhaseTimer, collect_batch, update
    from trainer.stages.skill_sft import skill_sft

    torch.set_num_threads(1)
    micro = ROOT / "tests" / "support" / "data" / "train_micro.yaml"
    cfg = resolve(load_config(micro, [*overrides, f"output.dir={out}"]))
    env_factory(cfg)().panel(cfg.env.train_split)  # the env's own memory before the baseline
    ctx = build_components(cfg)
    # The baseline: the process after start-up less the model's tensors, so that what start-up
    # grows besides them (the tokenizer it trains, the environments, Python's heap; 136 MiB
    # here, which made the score phase read 1.28 of its estimate) counts as the process's own.
    before = _status("VmRSS") - _resident_tensors(ctx)
    peaks = Peaks()
    with peaks("stage1"):
        skill_sft(ctx)
    start_rl(ctx)
    update(ctx, collect_batch(ctx, 1, PhaseTimer()), 1, PhaseTimer())  # AdamW's moments from here on

    class Timer(PhaseTimer):  # the trainer's phases, each also measured
        @contextmanager
        def __call__(self, phase: str):
            with peaks(phase), PhaseTimer.__call__(self, phase):
                yield

    # The RL phases' baseline: the process at the second step's start less its tensors (weights,
    # gradients, AdamW's moments, the reference).  What the run's Python objects grew since
    # start-up (Stage 1's and the first step's episodes, the tokenizer's caches: 90-140 MiB
    # here, varying between machines) is the process's own, which the plan counts as one part;
    # against the start-up baseline it made the 0.5 GiB score phase read 1.25-1.28.
    rl_before = _status("VmRSS") - _resident_tensors(ctx)
    timer = Timer()
    update(ctx, collect_batch(ctx, 2, timer), 2, timer)
    measured = {"stage1": peaks.peaks["stage1"] - before, "update": peaks.peaks["update"] - rl_before,
                "score": max(peaks.peaks.get(p, 0) for p in ("score", "reference", "teacher")) - rl_before}
    plan = plan_memory(cfg, device_gib=24.0)
    process = CPU_RUNTIME_GIB * GIB  # the baseline holds the process itself
    return {"params": plan.arch.params,
            "phases": {p: {"estimate": plan.phase(p) - process, "measured": measured[p]} for p in MEASURED},
            "growth": rl_before - before,
            "parts": {p: {part.name: part.bytes for part in plan.resident(p)} for p in MEASURED}}


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
           "MALLOC_MMAP_THRESHOLD_": "65536",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # this checkout's code
    child = [sys.executable, __file__, "--child", *[a for o in args.overrides for a in ("--set", o)]]
    done = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.splitlines()[-1])
    mib = 2**20
    print(f"backbone: tiny, {result['params'] / 1e6:.1f}M parameters, SEED's Stage 1 and two RL steps on CPU "
          f"(float32)")
    ok = True
    for phase, parts in result["parts"].items():
        print(f"\n{phase}: the plan's parts (MiB)")
        for name, value in parts.items():
            print(f"  {name}: {value / mib:.0f}")
    print(f"\n{'phase':8}  {'estimate MiB':>12}  {'measured MiB':>12}  {'ratio':>5}")
    for phase, figures in result["phases"].items():
        ratio = figures["measured"] / figures["estimate"]
        ok &= abs(ratio - 1) <= args.tolerance
        print(f"{phase:8}  {figures['estimate'] / mib:12.0f}  {figures['measured'] / mib:12.0f}  {ratio:5.2f}")
    print(f"measured: peak resident set less the process's own (its resident set less its tensors: after "
          f"start-up for Stage 1, at the second RL step's start for score and update, {result['growth'] / mib:.0f} "
          f"MiB more); tolerance +-{args.tolerance:.0%}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
