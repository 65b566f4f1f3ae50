"""``hindsight report STUDY.yaml``: a study's tracked runs -> paper tables and figures.

analysis/ loads and computes (runs, histories, per-turn records, summaries, diagnostics);
reports/ draws and formats; this module only connects them and logs the report on the
study's parent MLflow run.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from sweeps import sequential
from sweeps.cli.errors import CommandError
from sweeps.status import find_parent, study_children
from sweeps.study import load_study
from sweeps.trials import expand
from trainer.run.store import git_sha, make_client, with_retry

CURVE_KEYS = ("train/success", "train/episode_length", "train/entropy", "train/score",
              "writer/invalid_rate")


def build_study_report(study_path: str, report_dir: str | None = None,
                       external: str | None = None, n_boot: int = 2000, echo=print, *,
                       out: str | None = None, cells: str = "std", ci: str = "t",
                       ui_url: str | None = "http://127.0.0.1:5000") -> Path:
    """Load the study's runs, build every table and figure they support, write index.md and
    index.html, log the report folder on the study's parent run when there is one (the store
    is never written otherwise); return the index path.  ``out`` is the study's output folder
    when moved (as for every command), ``report_dir`` the report's folder (default
    ``<study output>/report``)."""
    # deferred: pandas and matplotlib load with the report only
    from analysis.curves import BUDGET_KEYS
    from analysis.loader import load_histories, load_records, load_runs
    from reports.index import ReportInputs, build_report

    study = load_study(study_path, out=out)
    started = time.perf_counter()
    runs = load_runs(study.store_uri, study.name)
    finished = runs[runs["status"] == "FINISHED"] if "status" in runs else runs
    if finished.empty:
        raise CommandError(f"study {study.name!r} has no finished runs yet "
                           f"({len(runs)} runs, none FINISHED); run `hindsight sweep {study_path}`")
    ids = list(finished["run_id"])
    evals = sorted(c for c in finished.columns if c.startswith("eval/") and c.endswith("/success"))
    histories = load_histories(study.store_uri, ids, [*CURVE_KEYS, *BUDGET_KEYS, *evals])
    records = load_records(study.store_uri, ids)
    inputs = ReportInputs.from_frames(runs, histories=histories, records=records,
                                      external_csv=external, expected=_expected(study),
                                      ui_url=ui_url or None, cell_format=cells, ci=ci,
                                      search=study.search is not None, n_boot=n_boot)
    if study.seeds_plan is not None:
        inputs = replace(inputs, seed_plan=plan_statement(study))
    out_dir = Path(report_dir) if report_dir else study.out_dir / "report"
    index = build_report(inputs, out_dir, study.name, git_sha(),
                         regenerate=f"hindsight report {study_path}")
    echo(f"report of {len(finished)} runs written to {index} in {time.perf_counter() - started:.1f}s")
    if _log_on_parent(study, out_dir):
        echo(f"in the MLflow UI (`hindsight ui {study_path}`): run {study.name} > Artifacts > "
             f"report > index.html")
    else:
        echo(f"study {study.name!r} has no parent run in {study.store_uri}; "
             "the report was not logged to the store")
    return index


def _expected(study) -> int | None:
    """Number of (cell, seed) trials the study defines (a search: trials x seeds; a
    ``seeds:`` plan: the pairs it has called for)."""
    if study.search is not None:
        return study.search.trials * study.search.seeds_per_trial
    if study.seeds_plan is not None:
        return len(sequential.round_trials(study, study_children(study)))
    return len(expand(study))


def plan_statement(study):
    """What the report says of the study's ``seeds:`` plan: the rule, and per cell the seeds
    it ran and the decision of its last look (the rule's own round on the store's runs)."""
    from reports.plans import PlanStatement  # deferred: with the report only

    children = study_children(study)
    metric = sequential.study_metric(study, children)
    step = sequential.current_round(study, children)
    ran = sequential.cell_values(children, metric)
    return PlanStatement(sequential.rule_text(study), step.looks,
                         {c: len(ran.get(c, {})) for c in step.targets},
                         sequential.comparisons(study), sequential.cell_labels(study))


def _log_on_parent(study, out_dir: Path) -> bool:
    """Log the report folder on the study's parent run; False (nothing written: no
    experiment is created) when the study has no parent run."""
    client = make_client(study.store_uri)
    experiment = with_retry(client.get_experiment_by_name, study.experiment)
    if experiment is None:
        return False
    parent = find_parent(client, experiment.experiment_id, study.name)
    if parent is None:
        return False
    with_retry(client.log_artifacts, parent.info.run_id, str(out_dir), "report")
    return True
