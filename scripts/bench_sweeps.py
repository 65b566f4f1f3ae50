"""Benchmark the sweep runner: worker cold start, per-trial overhead and concurrency speed-up.

    .venv/bin/python scripts/bench_sweeps.py [--trials 4] [--work-s 4] [--workload-trials 4]
                                             [--repeats 3]

Every timed study shares one sqlite store (created by a warm-up study), and each trial
appends its start time to a trace file, so a study's wall time splits into:

* cold start: from the launch to the first trial's start (Tune's setup and one fresh Ray
  worker per concurrency slot importing the trainable; paid once per study, in parallel
  across slots; a real trial's own imports of torch and transformers come on top);
* the sweep proper: from the first trial's start to the end of the study (workers started
  before this timed region are reused for every later trial).

1. Overhead: ``--trials`` trivial trials run one at a time; per-trial overhead = sweep
   proper / trials.  Target <= 1.5 s.
2. Concurrency: ``--workload-trials`` trials, each a CPU loop of about ``--work-s`` seconds,
   run one at a time and two at a time; speed-up = serial / concurrent sweep proper (target
   >= 1.6x, needs 2 free cores), and the same with the cold start included.  A pair of
   4-second studies moves by 0.2-0.3x between runs on a shared 2-core machine, so the pair
   is run ``--repeats`` times and the median is the figure.
Everything runs in a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweeps.ray_session import init_ray
from sweeps.runner import run_study
from sweeps.study import parse_study
from trainer.run.tracking import RunLogger


@dataclass
class Result:
    run_id: str
    status: str
    final_metrics: dict = field(default_factory=dict)


@dataclass
class Timing:
    wall: float  # launch to end
    cold: float  # launch to the first trial's start

    @property
    def sweep(self) -> float:
        return self.wall - self.cold


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


def make_train(trace: Path, iterations: int = 0):
    """A train function that records its start time (wall clock) in ``trace``, spins
    ``iterations`` loop steps and logs one metric, like a trial of the real trainer."""
    def train(cfg, *, run_id=None, resume=False, progress=True):
        with trace.open("a") as f:
            f.write(f"{time.time()}\n")
        _spin(iterations)
        logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
        run_id = logger.start(cfg, run_id=run_id)
        with logger:
            logger.log_metrics(0, {"train/success": 1.0})
        return Result(run_id, "FINISHED", {"train/success": 1.0})

    return train


def timed_study(root: Path, name: str, seeds: int, conc: int, iterations: int = 0) -> Timing:
    study = parse_study({"name": name, "grid": {"seed": list(range(seeds))},
                         "resources": {"cpus": 1}, "max_concurrent": conc,
                         "tracking_uri": f"sqlite:///{root / 'mlruns.db'}"},
                        folder=root, out=root / name)
    trace = root / f"{name}.starts"
    start = time.time()
    status = run_study(study, train_fn=make_train(trace, iterations), echo=lambda _: None)
    end = time.time()
    assert status is not None and status.complete, status.format()
    first = min(float(line) for line in trace.read_text().split())
    return Timing(end - start, first - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--work-s", type=float, default=4.0)
    parser.add_argument("--workload-trials", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_sweeps_"))
    start = time.perf_counter()
    init_ray()
    print(f"ray start: {time.perf_counter() - start:.1f} s")
    timed_study(root, "warmup", 1, 1)  # the store's creation and first imports
    over = timed_study(root, "overhead", args.trials, 1)
    print(f"overhead: {args.trials} trivial trials serially: cold start {over.cold:.1f} s, then "
          f"{over.sweep:.1f} s -> {over.sweep / args.trials:.2f} s per trial (target <= 1.5 s)")
    n = args.workload_trials
    ratios, with_cold = [], []
    for r in range(args.repeats):
        iterations = calibrate(args.work_s)
        serial = timed_study(root, f"serial{r}", n, 1, iterations)
        together = timed_study(root, f"concurrent{r}", n, 2, iterations)
        ratios.append(serial.sweep / together.sweep)
        with_cold.append(serial.wall / together.wall)
        print(f"[{r + 1}/{args.repeats}] {n} trials x ~{args.work_s:.1f} s of CPU: cold start "
              f"serial {serial.cold:.1f} s, concurrent {together.cold:.1f} s; after the "
              f"workers started: serial {serial.sweep:.1f} s, concurrent {together.sweep:.1f} s "
              f"-> {ratios[-1]:.2f}x; with the cold start {with_cold[-1]:.2f}x")
    print(f"concurrency speed-up (median of {args.repeats}): {statistics.median(ratios):.2f}x "
          f"after the workers started (target >= 1.6x), {statistics.median(with_cold):.2f}x "
          "with each study's cold start")

if __name__ == "__main__":
    main()
