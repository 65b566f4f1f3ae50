"""``hindsight report STUDY.yaml``: a study's tracked runs -> paper tables and figures.

analysis/ loads and computes (runs, histories, per-turn records, summaries, diagnostics);
reports/ draws and formats; this module only connects them and logs the report on the
study's parent MLflow run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sweeps.cli import CommandError
from sweeps.status import find_parent
from sweeps.study import load_study
from trainer.tracking import experiment_id, git_sha, make_client, with_retry

CURVE_KEYS = ("train/success", "train/episode_length", "train/entropy", "train/score")


def build_study_report(study_path: str, report_dir: str | None = None,
                       external: str | None = None, n_boot: int = 2000, echo=print, *,
                       out: str | None = None) -> Path:
    """Load the study's runs, build every table and figure they support, write index.md,
    log the report folder on the parent run; return the index path.  ``out`` is the study's
    output folder when moved (as for every command), ``report_dir`` the report's folder
    (default ``<study output>/report``)."""
    from analysis.loader import load_histories, load_records, load_runs
    from reports.index import ReportInputs, build_report

    study = load_study(study_path, out=out)
    started = time.perf_counter()
    runs = load_runs(study.store_uri, study.name)
    finished = runs[runs["status"] == "FINISHED"] if "status" in runs else runs
    if finished.empty:
        raise CommandError(f"study {study.name!r} has no finished runs yet; run "
                           f"`hindsight sweep {study_path}`")
    ids = list(finished["run_id"])
    histories = load_histories(study.store_uri, ids, CURVE_KEYS)
    records = load_records(study.store_uri, ids)
    inputs = ReportInputs.from_frames(finished, histories=histories, records=records,
                                      external_csv=external, n_boot=n_boot)
    out_dir = Path(report_dir) if report_dir else study.out_dir / "report"
    index = build_report(inputs, out_dir, study.name, git_sha(),
                         regenerate=f"hindsight report {study_path}")
    echo(f"report of {len(finished)} runs written to {index} in {time.perf_counter() - started:.1f}s")
    if _log_on_parent(study, out_dir):
        echo(f"in the MLflow UI (`hindsight ui {study_path}`): run {study.name} > Artifacts > "
             f"report > index.html")
    return index


def _log_on_parent(study, out_dir: Path) -> bool:
    """Log the report folder as the parent run's ``report/`` artifacts; False without one."""
    client = make_client(study.store_uri)
    parent = find_parent(client, experiment_id(client, study.experiment), study.name)
    if parent is not None:
        with_retry(client.log_artifacts, parent.info.run_id, str(out_dir), "report")
    return parent is not None


def report_command(args: argparse.Namespace) -> int:
    """Regenerate a study's paper tables and figures from its tracked runs (index.md and
    index.html, logged on the study's parent run)."""
    build_study_report(args.study, args.report_dir, args.external, args.n_boot, out=args.out)
    return 0
