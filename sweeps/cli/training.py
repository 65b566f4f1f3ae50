"""``train`` and ``eval``: one run from a run config, or a checkpoint on the fixed panels."""

from __future__ import annotations

import argparse
import os

from sweeps.cli.errors import CommandError
from sweeps.cli.loading import check_memory, load_run
from sweeps.ranks import RanksFailed, train_on_ranks
from trainer.run import loop
from trainer.run.store import tracking_uri
from trainer.run.tracking import RunLogger


def train_command(args: argparse.Namespace) -> int:
    """Train one run (warm start, skill SFT, RL) from a run config; exit 1 if it fails.
    With ``parallel.workers`` > 1 the ranks run as Ray Train workers (:mod:`sweeps.ranks`).
    A run whose planned peak exceeds this machine's device is refused before anything loads
    (``--ignore-memory`` starts it; a cluster's ``--address`` is not planned here)."""
    cfg = load_run(args.config, args.overrides)
    if not (args.ignore_memory or args.address):
        check_memory([cfg])
    if cfg.parallel.workers > 1:
        result = _train_on_ranks(cfg, args)
    else:
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


def _train_on_ranks(cfg, args: argparse.Namespace):
    """The run on Ray Train ranks. The run is created here first (or continued), so that a
    rank's failure marks it FAILED with that rank's traceback even when rank 0 was killed."""
    from sweeps.ray_session import init_ray  # deferred: Ray, which a single-rank run never needs

    init_ray(args.address or "")
    run_id = args.run_id
    logger = RunLogger(tracking_uri(cfg), cfg.tracking.experiment)
    if run_id is not None or not args.resume:  # a resume without --run-id: rank 0 reads it from the checkpoint
        run_id = logger.start(cfg, run_id=run_id)
    try:
        return train_on_ranks(cfg, run_id=run_id, resume=args.resume, progress=True)
    except RanksFailed as exc:
        if logger.run_id is not None:
            logger.fail(exc)
        print(f"error: {exc}")
        return loop.RunResult(run_id or "", "FAILED")
