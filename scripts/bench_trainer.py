"""Trainer step cost on CPU: SEED and ETRO vs GRPO on the same batch, tiny backbone.

Every method starts from the same warm-started weights and plays the same tasks with the same
seed, so the rollouts are identical; the step time covers every phase (rollout, write, score,
reference, teacher, advantage, update).  The weights are the bundled warm start of the CPU
level (examples/household_small.yaml), whose self writer writes valid skills, and the writer
keeps its default token budget.  Targets: SEED <= 1.2x GRPO (writer included), ETRO <= 1.25x.
Rollout tokens/s is printed per method.  (The full-vs-window scoring ratio is printed by
scripts/bench_scoring.py.)

    .venv/bin/python scripts/bench_trainer.py [--repeats 3] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from trainer.config import apply_overrides
from trainer.run.components import build_components, start_rl
from trainer.run.resolve import load_config, resolve
from trainer.stages.rl import PhaseTimer, collect_batch, update
from trainer.stages.warm_start import bundle_path, check_bundle

TARGETS = {"seed": 1.2, "etro": 1.25}
CONFIG = Path(__file__).resolve().parent.parent / "examples" / "household_small.yaml"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(CONFIG, ["model.device=cpu", *args.overrides])
    weights = bundle_path(cfg.stages.warm_start.checkpoint)
    check_bundle(resolve(cfg), weights)
    results = {m: step_seconds(cfg, m, str(weights), args.repeats) for m in ("grpo", "seed", "etro")}
    grpo = results["grpo"][0]
    print(f"batch: {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} trajectories, "
          f"env {cfg.env.name} ({cfg.env.level}), context {cfg.env.context}, writer budget "
          f"{cfg.writer.max_new_tokens} tokens, warm start {weights.name}, median of {args.repeats}")
    for method, (seconds, phases, tokens_per_s) in results.items():
        detail = ", ".join(f"{k} {v:.2f}s" for k, v in sorted(phases.items()))
        print(f"{method:5s} step {seconds:6.2f}s  ratio vs grpo {seconds / grpo:4.2f}  "
              f"rollout {tokens_per_s:6.0f} tokens/s  [{detail}]")
    for method, target in TARGETS.items():
        ratio = results[method][0] / grpo
        print(f"target {method} <= {target:.2f}x grpo: {ratio:.2f}x {'ok' if ratio <= target else 'MISSED'}")


if __name__ == "__main__":
    main()
