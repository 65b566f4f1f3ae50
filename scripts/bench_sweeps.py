"""Benchmark the sweep runner: per-trial overhead and concurrency speed-up.

    .venv/bin/python scripts/bench_sweeps.py [--trials 4] [--work-s 4]

1. Overhead: ``--trials`` trials of a trivial train function run one at a time; overhead
   per trial = (wall time of the launch - Ray start) / trials.  Target <= 5 s.
2. Concurrency: a fixed workload of ``--workload-trials`` trials, each a CPU loop sized to
   about ``--work-s`` seconds, run one at a time (max_concurrent 1) and two at a time
   (max_concurrent 2); speed-up = serial / concurrent.  Target >= 1.6x (needs 2 free cores).
   Each concurrency slot starts one cold Ray worker (torch/transformers imports, ~10 s under
   load) that later trials of the study reuse, so a workload of a single trial per slot
   measures the cold start rather than the sweep.
Everything runs in a temporary folder with its own sqlite store.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweeps.runner import init_ray, run_study
from sweeps.study import parse_study
from trainer.tracking import RunLogger


@dataclass
class Result:
    run_id: str
    status: str
    final_metrics: dict = field(default_factory=dict)


def _spin(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def calibrate(seconds: float) -> int:
    """Loop iterations that take about ``seconds`` on this machine right now."""
    start, n = time.perf_counter(), 2_000_000
    _spin(n)
    return int(n * seconds / (time.perf_counter() - start))


def trivial_train(cfg, *, run_id=None, resume=False, progress=True):
    logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
    run_id = logger.start(cfg, run_id=run_id)
    with logger:
        logger.log_metrics(0, {"train/success": 1.0})
    return Result(run_id, "FINISHED", {"train/success": 1.0})


def cpu_train(iterations: int):
    def train(cfg, *, run_id=None, resume=False, progress=True):
        _spin(iterations)
        return trivial_train(cfg, run_id=run_id)

    return train


def timed_study(root: Path, name: str, seeds: int, conc: int, train) -> float:
    study = parse_study({"name": name, "grid": {"seed": list(range(seeds))},
                         "resources": {"cpus": 1}, "max_concurrent": conc},
                        folder=root, out=root / name)
    start = time.perf_counter()
    status = run_study(study, train_fn=train, echo=lambda _: None)
    assert status is not None and status.complete, status.format()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--work-s", type=float, default=4.0)
    parser.add_argument("--workload-trials", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_sweeps_"))
    start = time.perf_counter()
    init_ray()
    ray_s = time.perf_counter() - start
    print(f"ray start: {ray_s:.1f} s")
    timed_study(root, "warmup", 1, 1, trivial_train)  # first store creation, worker imports
    wall = timed_study(root, "overhead", args.trials, 1, trivial_train)
    print(f"overhead: {args.trials} trivial trials serially in {wall:.1f} s -> "
          f"{wall / args.trials:.2f} s per trial (target <= 5 s)")
    iterations = calibrate(args.work_s)
    n = args.workload_trials
    serial = timed_study(root, "serial", n, 1, cpu_train(iterations))
    together = timed_study(root, "concurrent", n, 2, cpu_train(iterations))
    print(f"cpu workload {n} trials x ~{args.work_s:.1f} s: serial {serial:.1f} s, concurrent "
          f"{together:.1f} s -> speed-up {serial / together:.2f}x (target >= 1.6x)")


if __name__ == "__main__":
    main()
