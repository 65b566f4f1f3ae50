"""What a study's MLflow store says: its parent run, its child runs per (cell, seed), the
cells x seeds status table, and the ``status`` / ``ui`` commands.

State of a (cell, seed) pair from its child runs: ``finished`` if any run FINISHED, else
``running`` if one is RUNNING, else ``failed`` if one FAILED/KILLED, else ``missing`` (no run,
or only a SCHEDULED one that never started).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from sweeps.study import Study, expand, load_study
from trainer.tracking import KIND_TAG, make_client, with_retry

STATES = ("finished", "running", "failed", "missing")
Key = tuple[str, int]


# ---------------------------------------------------------------------------- queries


def store_exists(uri: str) -> bool:
    """False for a sqlite store whose file does not exist yet (nothing launched)."""
    return not uri.startswith("sqlite:///") or Path(uri[len("sqlite:///"):]).is_file()


def _search(client: MlflowClient, exp_id: str, filter_string: str) -> list[Run]:
    runs, token = [], None
    while True:
        page = with_retry(client.search_runs, [exp_id], filter_string=filter_string,
                          max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def find_parent(client: MlflowClient, exp_id: str, study: str) -> Run | None:
    """The study's parent run (tag hindsight.kind=study), oldest first if several."""
    runs = _search(client, exp_id, f"tags.study = '{study}' AND tags.`{KIND_TAG}` = 'study'")
    return min(runs, key=lambda r: r.info.start_time) if runs else None


def child_runs(client: MlflowClient, exp_id: str, study: str) -> dict[Key, list[Run]]:
    """Child (trial) runs of ``study`` grouped by (cell_id, seed)."""
    runs = _search(client, exp_id, f"tags.study = '{study}' AND tags.`{KIND_TAG}` = 'trial'")
    out: dict[Key, list[Run]] = {}
    for run in runs:
        key = (run.data.tags.get("cell_id", ""), int(run.data.tags.get("seed", -1)))
        out.setdefault(key, []).append(run)
    return out


def pair_state(runs: list[Run]) -> str:
    statuses = {r.info.status for r in runs}
    if "FINISHED" in statuses:
        return "finished"
    if "RUNNING" in statuses:
        return "running"
    return "failed" if statuses & {"FAILED", "KILLED"} else "missing"


def reusable_run(runs: list[Run]) -> Run | None:
    """The run an unfinished pair continues: RUNNING, else SCHEDULED, else the newest
    FAILED/KILLED one (so a relaunch never adds a duplicate child)."""
    for status in ("RUNNING", "SCHEDULED", "FAILED", "KILLED"):
        same = [r for r in runs if r.info.status == status]
        if same:
            return max(same, key=lambda r: r.info.start_time)
    return None


def study_children(study: Study) -> dict[Key, list[Run]]:
    """Child runs of ``study`` in its store ({} when nothing was launched)."""
    if not store_exists(study.store_uri):
        return {}
    client = make_client(study.store_uri)
    exp = with_retry(client.get_experiment_by_name, study.experiment)
    return {} if exp is None else child_runs(client, exp.experiment_id, study.name)


# ---------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class StudyStatus:
    """Cells x seeds states of a study; ``cells`` is [(cell_id, description)]."""

    study: str
    cells: list[tuple[str, str]]
    seeds: list[int]
    states: dict[Key, str]

    def counts(self) -> dict[str, int]:
        values = list(self.states.values())
        return {s: values.count(s) for s in STATES}

    @property
    def complete(self) -> bool:
        return bool(self.states) and all(s == "finished" for s in self.states.values())

    def format(self) -> str:
        width = max([len(d) for _, d in self.cells] + [4])
        head = f"{'cell':<{width}}  " + "  ".join(f"seed {s:<4}" for s in self.seeds)
        lines = [f"study {self.study}", head]
        for cid, desc in self.cells:
            cells = "  ".join(f"{self.states.get((cid, s), '-'):<9}" for s in self.seeds)
            lines.append(f"{desc:<{width}}  {cells}")
        counts = self.counts()
        lines.append(", ".join(f"{counts[s]} {s}" for s in STATES))
        return "\n".join(lines)


def study_status(study: Study) -> StudyStatus:
    """Grid studies: every expanded (cell, seed) pair; searches: the pairs in the store."""
    children = study_children(study)
    if study.search is None:
        trials = expand(study)
        cells = list(dict.fromkeys((t.cell_id, _describe(t.cell_id, t.overrides)) for t in trials))
        keys = [t.key for t in trials]
    else:
        keys = sorted(children)
        cells = list(dict.fromkeys((k[0], _describe_run(k[0], children[k][0])) for k in keys))
    seeds = sorted({seed for _, seed in keys})
    states = {k: pair_state(children.get(k, [])) for k in keys}
    return StudyStatus(study.name, cells, seeds, states)


def _describe(cid: str, overrides: tuple) -> str:
    return " ".join([cid, *(f"{k}={v}" for k, v in overrides)])


def _describe_run(cid: str, run: Run) -> str:
    return f"{cid} {run.data.tags.get('method', '')}"


# ---------------------------------------------------------------------------- commands


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", help="study YAML file")
    parser.add_argument("--out", default=None, help="the study's output folder, if moved")


def status_command(args: argparse.Namespace) -> int:
    """Show a study's cells x seeds table (finished/running/failed/missing); exit 0 when complete."""
    status = study_status(load_study(args.study, out=args.out))
    print(status.format())
    return 0 if status.complete else 1


def add_ui_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", help="study YAML file")
    parser.add_argument("--out", default=None, help="the study's output folder, if moved")
    parser.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")


def ui_argv(study: Study, port: int) -> list[str]:
    """``mlflow ui`` on 127.0.0.1 against the study's store (and its artifact folder)."""
    argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", study.store_uri,
            "--host", "127.0.0.1", "--port", str(port)]
    if study.store_uri.startswith("sqlite:///"):
        root = Path(study.store_uri[len("sqlite:///"):]).parent / "artifacts"
        argv += ["--default-artifact-root", root.as_uri()]
    return argv


def ui_command(args: argparse.Namespace) -> int:
    """Serve the MLflow UI for a study's store on 127.0.0.1 (Ctrl-C stops it)."""
    study = load_study(args.study, out=args.out)
    print(f"MLflow UI for study {study.name} at http://127.0.0.1:{args.port}")
    try:
        return subprocess.call(ui_argv(study, args.port))
    except KeyboardInterrupt:
        return 0

