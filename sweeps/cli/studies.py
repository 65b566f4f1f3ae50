"""Commands on a study: ``sweep`` (launch or continue it on Ray Tune), ``status``, ``ui``
(the MLflow UI or a tracking server) and ``report`` (its tables and figures)."""

from __future__ import annotations

import argparse
import os
import sys

from sweeps.cli.loading import check_memory
from sweeps.report import build_study_report
from sweeps.runner import run_study
from sweeps.status import LOOPBACK, UI_ENV, serve, study_links, study_status, ui_argv
from sweeps.study import load_study
from sweeps.trials import study_configs
from trainer.config import ConfigError
from trainer.run.dependencies import check_extras
from trainer.run.resolve import resolve


def sweep_command(args: argparse.Namespace) -> int:
    """Launch or continue a study on Ray Tune; exit 0 when every (cell, seed) has finished."""
    study = load_study(args.study, out=args.out)
    if not (args.address or study.ray_address):  # a cluster's workers have their own packages and devices
        for cfg in study_configs(study):
            check_extras(cfg)
        if not args.ignore_memory:
            check_memory(resolve(cfg) for cfg in study_configs(study))
    status = run_study(study, retry_failed=args.retry_failed, max_concurrent=args.max_concurrent,
                       address=args.address, dry_run=args.dry_run, bar=sys.stderr.isatty())
    if status is None:
        return 0
    print(status.format())
    return 0 if status.complete else 1


def status_command(args: argparse.Namespace) -> int:
    """Show a study's cells x seeds table (finished/running/failed/missing); exit 0 when complete."""
    status = study_status(load_study(args.study, out=args.out))
    print(status.format())
    return 0 if status.complete else 1


def ui_command(args: argparse.Namespace) -> int:
    """Serve the MLflow UI for a study's store on 127.0.0.1 until Ctrl-C or SIGTERM."""
    if args.workers < 1:
        raise ConfigError(f"--workers: expected an integer >= 1, got {args.workers}")
    study = load_study(args.study, out=args.out)
    argv = ui_argv(study, args.port, args.workers, args.host, args.backend_store_uri,
                   args.artifacts_destination)
    base_url = f"http://{args.host}:{args.port}"
    print(f"MLflow UI for study {study.name} at {base_url} (Ctrl-C stops it)")
    if args.host != LOOPBACK:
        print(f"  listening on {args.host}: other machines can reach it (default: {LOOPBACK})")
    links = study_links(study, base_url, args.backend_store_uri)
    for line in links or [f"no runs yet: launch `hindsight sweep {args.study}`"]:
        print(f"  {line}")
    sys.stdout.flush()
    return serve(argv, {**os.environ, **UI_ENV})


def report_command(args: argparse.Namespace) -> int:
    """Regenerate a study's paper tables and figures from its tracked runs (index.md and
    index.html, logged on the study's parent run)."""
    build_study_report(args.study, args.report_dir, args.external, args.n_boot, out=args.out,
                       cells=args.cells, ci=args.ci, ui_url=args.ui_url)
    return 0
