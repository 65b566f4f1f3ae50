"""``train`` and ``eval``: one run from a run config, or a checkpoint on the fixed panels."""

from __future__ import annotations

import argparse
import os

from sweeps.cli.errors import CommandError
from sweeps.cli.loading import load_run
from trainer.run import loop


def train_command(args: argparse.Namespace) -> int:
    """Train one run (warm start, skill SFT, RL) from a run config; exit 1 if it fails."""
    cfg = load_run(args.config, args.overrides)
    result = loop.train(cfg, run_id=args.run_id, resume=args.resume, progress=True)
    print(f"run {result.run_id}: {result.status}")
    for key, value in sorted(result.final_metrics.items()):
        print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    return 0 if result.status == "FINISHED" else 1


def eval_command(args: argparse.Namespace) -> int:
    """Evaluate a checkpoint on the config's fixed evaluation panels; print the metrics."""
    cfg = load_run(args.config, args.overrides)
    if args.checkpoint is not None and not os.path.isdir(args.checkpoint):
        raise CommandError(f"--checkpoint {args.checkpoint}: no such checkpoint folder")
    try:
        metrics = loop.evaluate(cfg, args.checkpoint)
    except FileNotFoundError as e:  # no checkpoint in output.dir yet
        raise CommandError(str(e)) from None
    for key, value in sorted(metrics.items()):
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return 0
