"""Trainer step cost on CPU: SEED and ETRO vs GRPO on the same batch, tiny backbone.

Every method starts from the same warm-started weights and plays the same tasks with the same
seed, so the rollouts are identical; the step time covers every phase (rollout, write, score,
reference, teacher, advantage, update).  Targets: SEED <= 1.3x GRPO (writer included), ETRO
<= 1.3x.  (The full-vs-window scoring ratio is printed by scripts/bench_scoring.py.)

    .venv/bin/python scripts/bench_trainer.py [--repeats 3] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch

from trainer.config import apply_overrides, load_config, resolve
from trainer.context import build_context, start_rl
from trainer.rl import PhaseTimer, collect_batch, update
from trainer.stages import warm_start

TARGET = 1.3
CONFIG = Path(__file__).resolve().parent.parent / "examples" / "train_tiny.yaml"


def step_seconds(base_cfg, method: str, weights: dict, repeats: int) -> tuple[float, dict]:
    # base_cfg is unresolved, so each method gets its own default writer, teacher and lambda
    cfg = resolve(apply_overrides(base_cfg, [f"algo.method={method}", "stages.warm_start.enabled=false"]))
    times, phases = [], {}
    for _ in range(repeats):
        ctx = build_context(cfg)
        ctx.model.load_state_dict(weights)
        start_rl(ctx)
        timer = PhaseTimer()
        start = time.perf_counter()
        batch = collect_batch(ctx, step=1, timer=timer)
        update(ctx, batch, 1, timer)
        times.append(time.perf_counter() - start)
        phases = timer.seconds
    return statistics.median(times), phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(CONFIG, ["stages.warm_start.cache=false", "writer.max_new_tokens=48", *args.overrides])
    ctx = build_context(resolve(cfg))
    warm_start(ctx)
    weights = copy.deepcopy(ctx.model.state_dict())
    results = {m: step_seconds(cfg, m, weights, args.repeats) for m in ("grpo", "seed", "etro")}
    grpo = results["grpo"][0]
    print(f"batch: {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.group_size} trajectories, "
          f"env {cfg.env.name}, context {cfg.env.context}, median of {args.repeats}")
    for method, (seconds, phases) in results.items():
        detail = ", ".join(f"{k} {v:.2f}s" for k, v in sorted(phases.items()))
        print(f"{method:5s} step {seconds:6.2f}s  ratio vs grpo {seconds / grpo:4.2f}  [{detail}]")
    for method in ("seed", "etro"):
        ratio = results[method][0] / grpo
        print(f"target {method} <= {TARGET:.1f}x grpo: {ratio:.2f}x {'ok' if ratio <= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
