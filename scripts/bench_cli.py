"""Benchmark the command line's start-up: what a user waits for before anything happens.

    .venv/bin/python scripts/bench_cli.py [--repeat 5]

Prints the median wall time of ``hindsight --help`` (target < 0.5 s: building the parser
imports neither Ray, MLflow nor pandas), ``hindsight --version``, bare ``hindsight`` and
``hindsight validate`` on a run config (imports the method registry, hence torch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "--help": (["--help"], 0.5),
    "--version": (["--version"], 0.5),
    "(no arguments)": ([], 0.5),
    "validate examples/train_tiny.yaml": (["validate", "examples/train_tiny.yaml"], None),
}


def wall_time(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, (argv, target) in CASES.items():
        wall_time(argv)  # warm the file cache
        median = statistics.median(wall_time(argv) for _ in range(args.repeat))
        goal = (
            f"(target < {target:.1f} s: {'ok' if median < target else 'MISSED'})" if target else ""
        )
        print(f"hindsight {name:<36} {median:6.2f} s median of {args.repeat} {goal}".rstrip())


if __name__ == "__main__":
    main()
