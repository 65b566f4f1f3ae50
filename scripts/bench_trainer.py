"""Trainer step cost on CPU: SEED and ETRO vs GRPO on the same batch, tiny backbone.

Every method starts from the same warm-started weights and plays the same tasks with the same
seed, so the rollouts are identical; the step time covers every phase (rollout, write, score,
reference, teacher, advantage, update).  The weights are the bundled warm start of the CPU
level (examples/household_small.yaml), whose self writer writes valid skills, and the writer
keeps its default token budget.  Targets: SEED <= 1.2x GRPO (writer included), ETRO <= 1.25x.
Rollout tokens/s is printed per method.  (The full-vs-window scoring ratio is printed by
scripts/bench_scoring.py.)

Beside the step, the whole trial of the demo (examples/quickstart.yaml's trial: the bundled
EZPoints warm start, SEED's Stage 1 and writer panel, 10 RL steps of 64 trajectories, the
evaluations) is run once per method (``--methods``), with its wall and CPU seconds, its ratio
against GRPO's (CPU: a shared machine's load stays out of it; the demo runs each trial on a
core of its own) and the CPU seconds of each phase (``time/<phase>_s`` summed over the run, the
phase timer read on the process's CPU clock; ``teacher`` is SEED's current teacher inside the
update).  Target: a SEED trial <= 1.3x a GRPO trial.  The trials take minutes; ``--no-trial``
skips them, ``--no-step`` the step, ``--trial-set`` overrides their config.

    .venv/bin/python scripts/bench_trainer.py [--repeats 3] [--set key=value ...] [--no-step]
        [--no-trial] [--methods grpo,seed,etro] [--trial-set key=value ...]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import types
from pathlib import Path

import torch
import yaml

import trainer.stages.phases
from trainer.config import apply_overrides
from trainer.run.components import build_components, start_rl
from trainer.run.loop import train
from trainer.run.resolve import load_config, resolve
from trainer.run.store import make_client
from trainer.stages.rl import PhaseTimer, collect_batch, update
from trainer.stages.warm_start import bundle_path, check_bundle

TARGETS = {"seed": 1.2, "etro": 1.25}
TRIAL_TARGETS = {"seed": 1.3}
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CONFIG = EXAMPLES / "household_small.yaml"
DEMO = EXAMPLES / "quickstart.yaml"  # the demo study; its trial is its base with its `set`


def step_seconds(base_cfg, method: str, weights: str, repeats: int) -> tuple[float, dict, float]:
    """Median step seconds, the phases of the last repeat and its rollout tokens/s."""
    # base_cfg is unresolved, so each method gets its own default writer, teacher and lambda
    cfg = resolve(apply_overrides(base_cfg, [f"algo.method={method}", "stages.skill_sft.enabled=false"]))
    times, phases, tokens_per_s = [], {}, 0.0
    for _ in range(repeats):
        ctx = build_components(cfg, init_from=weights)
        start_rl(ctx)
        timer = PhaseTimer()
        start = time.perf_counter()
        batch = collect_batch(ctx, step=1, timer=timer)
        update(ctx, batch, 1, timer)
        times.append(time.perf_counter() - start)
        phases = timer.seconds
        tokens_per_s = batch.generated_tokens / max(timer.seconds.get("rollout", 0.0), 1e-9)
    return statistics.median(times), phases, tokens_per_s


def demo_trial_config(overrides: list[str]):
    """The demo's trial config (examples/quickstart.yaml's base and ``set``), then ``overrides``."""
    study = yaml.safe_load(DEMO.read_text())
    fixed = [f"{k}={v}" for k, v in study.get("set", {}).items()]
    return load_config(DEMO.parent / study["base"], ["model.device=cpu", *fixed, *overrides])


@contextlib.contextmanager
def cpu_phase_clock():
    """The phase timer (:class:`~trainer.stages.phases.PhaseTimer`) reads the process's CPU
    clock meanwhile: one torch thread, so its seconds are those of an idle core."""
    module = trainer.stages.phases
    wall = module.time
    module.time = types.SimpleNamespace(perf_counter=time.process_time)
    try:
        yield
    finally:
        module.time = wall


def trial_seconds(base_cfg, method: str, folder: Path) -> tuple[float, float, dict[str, float]]:
    """Wall and CPU seconds of one whole trial of ``method`` and the CPU seconds of each
    ``time/*`` phase."""
    db = folder / f"{method}.db"
    cfg = apply_overrides(base_cfg, [f"algo.method={method}", f"output.dir={folder / method}",
                                     f"tracking.uri=sqlite:///{db}", "output.log_checkpoints=false"])
    start, cpu = time.perf_counter(), time.process_time()
    with cpu_phase_clock():
        result = train(cfg, progress=False)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    client = make_client(f"sqlite:///{db}")
    stages = {}
    for key in client.get_run(result.run_id).data.metrics:
        if key.startswith("time/") and key != "time/trial_s":
            history = client.get_metric_history(result.run_id, key)
            stages[key.removeprefix("time/").removesuffix("_s")] = sum(m.value for m in history)
    return seconds, cpu, stages


def report_trials(overrides: list[str], methods: list[str]) -> None:
    cfg = demo_trial_config(overrides)
    with tempfile.TemporaryDirectory(prefix="bench-trial-") as tmp:
        results = {m: trial_seconds(cfg, m, Path(tmp)) for m in ["grpo", *(m for m in methods if m != "grpo")]}
    grpo = results["grpo"][1]
    print(f"trial: {DEMO.name}'s ({cfg.env.name}, {cfg.stages.rl.steps} RL steps of "
          f"{cfg.rollout.tasks_per_step * cfg.rollout.group_size} trajectories, {cfg.eval.max_tasks} eval tasks); "
          f"phases in CPU seconds")
    for method, (seconds, cpu, stages) in results.items():
        detail = ", ".join(f"{k} {v:.1f}s" for k, v in sorted(stages.items()) if v >= 0.05)
        print(f"{method:5s} trial {seconds:7.1f}s wall {cpu:7.1f}s CPU  ratio vs grpo (CPU) {cpu / grpo:4.2f}  "
              f"[{detail}]")
    for method, target in TRIAL_TARGETS.items():
        if method in results:
            ratio = results[method][1] / grpo
            print(f"target {method} trial <= {target:.2f}x grpo: {ratio:.2f}x {'ok' if ratio <= target else 'MISSED'}")


def report_step(overrides: list[str], repeats: int) -> None:
    cfg = load_config(CONFIG, ["model.device=cpu", *overrides])
    weights = bundle_path(cfg.stages.warm_start.checkpoint)
    check_bundle(resolve(cfg), weights)
    results = {m: step_seconds(cfg, m, str(weights), repeats) for m in ("grpo", "seed", "etro")}
    grpo = results["grpo"][0]
    print(f"batch: {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} trajectories, "
          f"env {cfg.env.name} ({cfg.env.level}), context {cfg.env.context}, writer budget "
          f"{cfg.writer.max_new_tokens} tokens, warm start {weights.name}, median of {repeats}")
    for method, (seconds, phases, tokens_per_s) in results.items():
        detail = ", ".join(f"{k} {v:.2f}s" for k, v in sorted(phases.items()))
        print(f"{method:5s} step {seconds:6.2f}s  ratio vs grpo {seconds / grpo:4.2f}  "
              f"rollout {tokens_per_s:6.0f} tokens/s  [{detail}]")
    for method, target in TARGETS.items():
        ratio = results[method][0] / grpo
        print(f"target {method} <= {target:.2f}x grpo: {ratio:.2f}x {'ok' if ratio <= target else 'MISSED'}")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--no-trial", action="store_true", help="only the step, not the demo's whole trials")
    parser.add_argument("--no-step", action="store_true", help="only the demo's whole trials, not the step")
    parser.add_argument("--methods", default="grpo,seed,etro", help="the trials' methods (GRPO always runs)")
    parser.add_argument("--trial-set", dest="trial_overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.no_step:
        report_step(args.overrides, args.repeats)
    if not args.no_trial:
        report_trials(args.trial_overrides, args.methods.split(","))

if __name__ == "__main__":
    main()
