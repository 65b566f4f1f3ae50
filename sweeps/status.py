"""What a study's MLflow store says: its parent run, its child runs per (cell, seed), the
cells x seeds status table, and the ``status`` / ``ui`` commands.

State of a (cell, seed) pair from its child runs: ``finished`` if any run FINISHED, else
``running`` if one is RUNNING, else ``pruned`` if a KILLED one carries ``pruned_at`` (a search's
pruner stopped it: done, not failed), else ``failed`` if one FAILED/KILLED, else ``missing`` (no
run, or only a SCHEDULED one that never started); in a grid with a ``seeds:`` plan, a missing
pair the plan has not called for (its cell was decided first) is ``unneeded``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from analysis.pruning import PRUNED_TAG
from sweeps.sequential import round_trials
from sweeps.study import Study, describe_overrides, distinguishing
from sweeps.trials import expand
from trainer.config import ConfigError
from trainer.run.store import make_client, with_retry
from trainer.run.tracking import KIND_TAG, redact_url

STATES = ("finished", "running", "failed", "missing")
PRUNED = "pruned"  # counted and shown only where a search pruned a trial
UNNEEDED = "unneeded"  # counted and shown only where a seeds: plan skipped a pair
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
    if any(r.info.status == "KILLED" and PRUNED_TAG in r.data.tags for r in runs):
        return PRUNED
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
        extra = {s: values.count(s) for s in (PRUNED, UNNEEDED) if s in values}
        return {**{s: values.count(s) for s in STATES}, **extra}

    @property
    def complete(self) -> bool:
        done = ("finished", PRUNED, UNNEEDED)
        return bool(self.states) and all(s in done for s in self.states.values())

    def format(self) -> str:
        width = max([len(d) for _, d in self.cells] + [4])
        head = f"{'cell':<{width}}  " + "  ".join(f"seed {s:<4}" for s in self.seeds)
        lines = [f"study {self.study}", head]
        for cid, desc in self.cells:
            cells = "  ".join(f"{self.states.get((cid, s), '-'):<9}" for s in self.seeds)
            lines.append(f"{desc:<{width}}  {cells}")
        counts = self.counts()
        lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
        return "\n".join(lines)


def study_status(study: Study) -> StudyStatus:
    """Grid studies: every expanded (cell, seed) pair; searches: the pairs in the store.  Each
    cell is described by its id and the values that set it apart from the other cells."""
    children = study_children(study)
    if study.search is None:
        trials = list({t.cell_id: t for t in expand(study)}.values())
        overrides = {t.cell_id: dict(t.overrides) for t in trials}
        keys = [t.key for t in expand(study)]
    else:
        keys = sorted(children)
        space = [p.key for p in study.search.space]
        overrides = {k[0]: _run_values(children[k][0], space) for k in keys}
    described = distinguishing(list(overrides.values()))
    cells = [(cid, f"{cid} {describe_overrides(d)}".strip()) for cid, d in zip(overrides, described)]
    seeds = sorted({seed for _, seed in keys})
    states = {k: pair_state(children.get(k, [])) for k in keys}
    if study.seeds_plan is not None:  # pairs the plan has not called for
        needed = {t.key for t in round_trials(study, children)}
        states = {k: UNNEEDED if s == "missing" and k not in needed else s
                  for k, s in states.items()}
    return StudyStatus(study.name, cells, seeds, states)


def _run_values(run: Run, keys: list[str]) -> dict[str, Any]:
    """The values of config ``keys`` in a run's params, as numbers where they parse."""
    out: dict[str, Any] = {"algo.method": run.data.tags.get("method", "")}
    for key in keys:
        out[key] = _number(run.data.params.get(key))
    return out


def _number(text: str | None) -> Any:
    """A logged param back as int or float when it is one (``"3"``, ``"4.6199"``, ``"1e-05"``)."""
    for parse in (int, float):
        try:
            return parse(text)
        except (TypeError, ValueError):
            pass
    return text


# ---------------------------------------------------------------------------- commands




# Server-side noise a UI user cannot act on: third-party deprecation warnings, MLflow's job
# runner (a huey consumer pool, used by GenAI features this tool does not use).
UI_ENV = {
    "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning,ignore::UserWarning",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


LOOPBACK = "127.0.0.1"


def ui_argv(study: Study, port: int, workers: int = 1, host: str = LOOPBACK,
            backend: str = "", artifacts: str | Path = "") -> list[str]:
    """The MLflow server command for a study, bound to ``host`` (loopback unless told
    otherwise) with ``workers`` server processes.

    * A sqlite store (the default): ``mlflow ui`` on it, artifacts read from beside it.
    * A database URL (``postgresql://...``; the study's ``tracking_uri`` or ``backend``): a
      tracking server, ``mlflow server``, that stores runs there and serves the artifacts from
      ``artifacts`` (default ``<out>/artifacts``), so that studies log to it by its http URI.
    * An http(s) store is already a server: a one-line error says so.
    """
    store = backend or study.store_uri
    if store.startswith(("http://", "https://")):
        raise ConfigError(f"study {study.name} logs to the tracking server at {redact_url(store)}; "
                          f"open that address, or serve its database with --backend-store-uri URL")
    if store.startswith("sqlite:///"):
        argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store,
                "--host", host, "--port", str(port), "--workers", str(workers)]
        root = Path(store[len("sqlite:///"):]).parent / "artifacts"
        return argv + ["--default-artifact-root", root.as_uri()]
    return server_argv(store, Path(artifacts) if artifacts else study.out_dir / "artifacts",
                       port, workers, host)


def server_argv(backend: str, artifacts: str | Path, port: int, workers: int = 1,
                host: str = LOOPBACK) -> list[str]:
    """``mlflow server`` storing runs in ``backend`` (a database URL) and artifacts under the
    local folder ``artifacts``, which it serves to its clients (``mlflow-artifacts:``)."""
    folder = Path(artifacts).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
            "--artifacts-destination", str(folder), "--serve-artifacts",
            "--host", host, "--port", str(port), "--workers", str(workers)]


def study_links(study: Study, base_url: str, store: str = "") -> list[str]:
    """Direct UI links: the study's experiment (its runs) and its parent run (the report)."""
    store = store or study.store_uri
    if not store_exists(store):
        return []
    client = make_client(store)
    exp = with_retry(client.get_experiment_by_name, study.experiment)
    if exp is None:
        return []
    links = [f"runs of study {study.name}: {base_url}/#/experiments/{exp.experiment_id}/runs"]
    parent = find_parent(client, exp.experiment_id, study.name)
    if parent is not None:
        links.append(f"study run (report under Artifacts): {base_url}/#/experiments/"
                     f"{exp.experiment_id}/runs/{parent.info.run_id}")
    return links


def serve(argv: list[str], env: dict[str, str]) -> int:
    """Run a server command in its own process group until it exits or this process gets
    SIGINT/SIGTERM; then stop the whole group (MLflow's server and its workers) so that
    nothing keeps serving the port.  Returns the server's exit code (0 when stopped)."""
    stopping: list[int] = []
    started: list[subprocess.Popen] = []

    def stop(signum, frame) -> None:
        stopping.append(signum)
        for proc in started:
            _signal_group(proc, signal.SIGTERM)

    # Handlers first: a signal between the start and the handlers would orphan the server.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
    except BaseException:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise
    started.append(proc)
    if stopping:  # stopped while starting
        _signal_group(proc, signal.SIGTERM)
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        _signal_group(proc, signal.SIGKILL)  # stragglers of the group (workers)
    return 0 if stopping else code


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
