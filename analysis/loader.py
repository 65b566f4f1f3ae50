"""Load a study's tracked runs from MLflow into tidy pandas frames.

Three frames, all keyed by ``run_id`` (the MLflow run id):

* :func:`load_runs` -- one row per training run (tag ``hindsight.kind`` = ``"trial"``) of a
  study, whatever its status: run id, status, experiment id, identity tags, every param
  as a column named by its dotted key (``algo.beta_opd``),
  the latest value of every ``eval/...`` and ``perf/...`` metric, and for every
  ``time/<phase>_s`` metric its sum over steps (``time/<phase>_s/sum``, the wall time the run
  spent in that phase) and its per-step mean (``time/<phase>_s/mean``); likewise
  ``writer/<name>/mean`` (e.g. ``writer/invalid_rate/mean``, the writer's invalid-output
  rate over training).
* :func:`load_histories` -- long frame ``run_id, key, step, value`` for curves.
* :func:`load_records` -- the per-turn Parquet records (``records/step_<NNNNNN>.parquet``
  artifacts) concatenated with a ``run_id`` column.

Speed (a 1,000-run study loads in seconds): when the tracking URI is a sqlite store, runs,
tags, params, latest metrics and metric histories are read straight from MLflow's tables
(read-only, a few indexed queries per chunk of runs); for any other store the general path
is ``MlflowClient.search_runs`` with paging (never per-run ``get_run``) and
``get_metric_history``. Both paths give identical frames (tested).
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import pandas as pd

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracking import MlflowClient
from mlflow.utils.file_utils import local_file_uri_to_path

from analysis.pruning import PRUNED_TAG

TRIAL_KIND = "trial"
KIND_TAG = "hindsight.kind"
# Tags copied to columns, in this order (``seed`` becomes an int): identity tags, and the
# step at which a search trial was pruned (analysis.pruning).
TAG_COLUMNS = ("study", "cell_id", "method", "env", "backbone", "seed", "method_writer", PRUNED_TAG)
RUN_COLUMNS = ("run_id", "status", "experiment_id", *TAG_COLUMNS)
LATEST_PREFIXES = ("eval/", "perf/")
TIME_PREFIX = "time/"
# Per-step metrics also aggregated over steps (``<key>/sum``, ``<key>/mean``).
AGGREGATED_PREFIXES = (TIME_PREFIX, "writer/")
HISTORY_COLUMNS = ("run_id", "key", "step", "value")
_PAGE = 1000
_SQL_CHUNK = 500
_RECORD_FILE = re.compile(r"step_(\d+)\.parquet$")


def load_runs(tracking_uri: str, study: str) -> pd.DataFrame:
    """All training runs of ``study`` as one row per run (columns described in the module doc).

    Params arrive from MLflow as strings and are converted per column: a column whose values
    all parse as numbers becomes numeric, ``"True"``/``"False"`` become bools, ``"None"``
    becomes missing; anything else stays a string. A param named like an identity tag
    (``seed``) is represented once, by the tag.

    Raises ValueError naming the study and the studies that do exist when nothing matches.
    """
    runs = _fetch_trials(tracking_uri, study)
    if not runs:
        known = sorted({r.tags.get("study", "") for r in _fetch_trials(tracking_uri, None)})
        raise ValueError(f"no trial runs with study={study!r} in {tracking_uri}; "
                         f"studies there: {known}")
    frame = pd.DataFrame([_run_row(r) for r in runs])
    frame = _coerce_params(frame, exclude=set(RUN_COLUMNS))
    frame["seed"] = pd.to_numeric(frame["seed"], errors="coerce").astype("Int64")
    frame = frame.sort_values(["method", "env", "cell_id", "seed", "run_id"], ignore_index=True)
    times = _time_aggregates(tracking_uri, runs)
    return frame.merge(times, on="run_id", how="left") if not times.empty else frame


def load_histories(tracking_uri: str, run_ids: Sequence[str], keys: Sequence[str]) -> pd.DataFrame:
    """Metric histories ``run_id, key, step, value`` (sorted) for the given runs and keys.

    When a (run, key, step) was logged more than once, the latest timestamp wins, as in
    MLflow's own ``latest_metrics``. NaN values come back as NaN.
    """
    if not run_ids or not keys:
        return pd.DataFrame(columns=list(HISTORY_COLUMNS))
    db = _sqlite_path(tracking_uri)
    frame = (_histories_sql(db, run_ids, keys) if db is not None
             else _histories_client(MlflowClient(tracking_uri), run_ids, keys))
    frame = frame.sort_values(["run_id", "key", "step", "timestamp"])
    frame = frame.drop_duplicates(["run_id", "key", "step"], keep="last")
    return frame[list(HISTORY_COLUMNS)].reset_index(drop=True)


def load_records(tracking_uri: str, run_ids: Sequence[str], *,
                 steps: Iterable[int] | None = None) -> pd.DataFrame:
    """Per-turn records of the given runs, concatenated, with a leading ``run_id`` column.

    Only ``records/step_<NNNNNN>.parquet`` artifacts are read; ``steps`` restricts them to
    those step numbers. Artifact roots are resolved with one query per chunk of runs (the
    ``runs`` table of a sqlite store, else ``search_runs``); local (``file:``) roots are
    read in place, others are downloaded to a temporary folder first. Runs without records
    contribute nothing; the result is an empty frame (with just ``run_id``) when no run has
    any.
    """
    wanted = None if steps is None else {int(s) for s in steps}
    db = _sqlite_path(tracking_uri)
    roots = (_artifact_roots_sql(db, run_ids) if db is not None
             else _artifact_roots(MlflowClient(tracking_uri), run_ids))
    parts = []
    with tempfile.TemporaryDirectory(prefix="hindsight-records-") as tmp:
        for run_id in run_ids:
            for path in _record_files(roots[run_id], wanted, Path(tmp) / run_id):
                part = pd.read_parquet(path)
                part.insert(0, "run_id", run_id)
                parts.append(part)
    if not parts:
        return pd.DataFrame(columns=["run_id"])
    return pd.concat(parts, ignore_index=True)


# ---------------------------------------------------------------- runs


class _Run(NamedTuple):
    """What the loader needs of one run, whichever path fetched it."""

    run_id: str
    status: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]  # latest value per key
    experiment_id: str = ""


def _fetch_trials(tracking_uri: str, study: str | None) -> list[_Run]:
    """Active trial runs of ``study`` (of every study when None) in active experiments."""
    db = _sqlite_path(tracking_uri)
    if db is not None:
        return _trials_sql(db, study)
    return _trials_client(MlflowClient(tracking_uri), study)


def _trials_client(client: MlflowClient, study: str | None) -> list[_Run]:
    """General path: ``search_runs`` over all active experiments, paged."""
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    query = f"tags.`{KIND_TAG}` = '{TRIAL_KIND}'"
    if study is not None:
        query += f" and tags.study = '{study}'"
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, query, max_results=_PAGE, page_token=token)
        runs += [_Run(r.info.run_id, r.info.status, r.data.tags, r.data.params,
                      r.data.metrics, str(r.info.experiment_id)) for r in page]
        token = page.token
        if not token:
            return runs


_TRIALS_SQL = f"""
SELECT r.run_uuid, r.status, r.experiment_id FROM runs r
JOIN experiments e ON e.experiment_id = r.experiment_id AND e.lifecycle_stage = 'active'
JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = '{KIND_TAG}' AND k.value = '{TRIAL_KIND}'
WHERE r.lifecycle_stage = 'active'
"""
_STUDY_SQL = " AND EXISTS (SELECT 1 FROM tags s WHERE s.run_uuid = r.run_uuid " \
             "AND s.key = 'study' AND s.value = ?)"


def _trials_sql(db: str, study: str | None) -> list[_Run]:
    """Fast path for sqlite stores: four queries per chunk of runs, read-only."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        sql, args = (_TRIALS_SQL, []) if study is None else (_TRIALS_SQL + _STUDY_SQL, [study])
        status, experiment = {}, {}
        for run_id, state, exp in conn.execute(sql, args).fetchall():
            status[run_id], experiment[run_id] = state, str(exp)
        ids = sorted(status)
        tags, params, metrics = ({r: {} for r in ids} for _ in range(3))
        for start in range(0, len(ids), _SQL_CHUNK):
            chunk = ids[start:start + _SQL_CHUNK]
            marks = ",".join("?" * len(chunk))
            for table, into in (("tags", tags), ("params", params)):
                rows = conn.execute(f"SELECT run_uuid, key, value FROM {table} "
                                    f"WHERE run_uuid IN ({marks})", chunk)
                for run_id, key, value in rows:
                    into[run_id][key] = value
            rows = conn.execute("SELECT run_uuid, key, value, is_nan FROM latest_metrics "
                                f"WHERE run_uuid IN ({marks})", chunk)
            for run_id, key, value, is_nan in rows:
                metrics[run_id][key] = float("nan") if is_nan else float(value)
    return [_Run(r, status[r], tags[r], params[r], metrics[r], experiment[r]) for r in ids]


def _run_row(run: _Run) -> dict:
    """Tags, params and the latest eval/perf metrics of one run as a flat row."""
    row = {"run_id": run.run_id, "status": run.status, "experiment_id": run.experiment_id}
    row.update({name: run.tags.get(name) for name in TAG_COLUMNS})
    row.update({k: v for k, v in run.params.items() if k not in row})
    row.update({k: v for k, v in run.metrics.items() if k.startswith(LATEST_PREFIXES)})
    return row


def _coerce_params(frame: pd.DataFrame, exclude: set[str]) -> pd.DataFrame:
    """Turn string param columns into numbers / bools where every value allows it."""
    out = {}
    for name, col in frame.items():
        if name in exclude or not pd.api.types.is_string_dtype(col):
            continue
        col = col.where(col != "None")
        values = col.dropna()
        if values.isin(["True", "False"]).all() and len(values):
            out[name] = col.map({"True": True, "False": False})
            continue
        numeric = pd.to_numeric(values, errors="coerce")
        if len(values) and numeric.notna().all():
            out[name] = pd.to_numeric(col)
        else:
            out[name] = col
    return frame.assign(**out)


def _time_aggregates(tracking_uri: str, runs: list[_Run]) -> pd.DataFrame:
    """Per run, ``<key>/sum`` and ``<key>/mean`` over all logged steps of every
    ``time/...`` (``time/<phase>_s``) and ``writer/...`` metric."""
    keys = sorted({k for r in runs for k in r.metrics if k.startswith(AGGREGATED_PREFIXES)})
    if not keys:
        return pd.DataFrame()
    hist = load_histories(tracking_uri, [r.run_id for r in runs], keys)
    agg = hist.groupby(["run_id", "key"])["value"].agg(["sum", "mean"]).unstack("key")
    agg.columns = [f"{key}/{stat}" for stat, key in agg.columns]
    return agg.reset_index()


# ---------------------------------------------------------------- histories


def _sqlite_path(tracking_uri: str) -> str | None:
    """The database file of a ``sqlite:///`` tracking URI, else None."""
    if not tracking_uri.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url  # deferred: heavy, and only sqlite URIs need it

    return make_url(tracking_uri).database


def _histories_sql(db: str, run_ids: Sequence[str], keys: Sequence[str]) -> pd.DataFrame:
    """Read the ``metrics`` table directly (read-only), chunked over runs."""
    key_marks = ",".join("?" * len(keys))
    frames = []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for start in range(0, len(run_ids), _SQL_CHUNK):
            chunk = list(run_ids[start:start + _SQL_CHUNK])
            # "+key": look rows up by run (index on run_uuid), not by key: the primary key
            # index starts with the key and walks every run of the store holding that key.
            sql = ("SELECT run_uuid AS run_id, key, step, timestamp, "
                   "CASE WHEN is_nan THEN NULL ELSE value END AS value FROM metrics "
                   f"WHERE run_uuid IN ({','.join('?' * len(chunk))}) AND +key IN ({key_marks})")
            frames.append(pd.read_sql_query(sql, conn, params=[*chunk, *keys]))
    frame = pd.concat(frames, ignore_index=True)
    return frame.astype({"value": float, "step": "int64"})


def _histories_client(client: MlflowClient, run_ids: Sequence[str],
                      keys: Sequence[str]) -> pd.DataFrame:
    """General fallback: one ``get_metric_history`` call per (run, key)."""
    rows = [(run_id, m.key, m.step, m.timestamp, m.value)
            for run_id in run_ids for key in keys
            for m in client.get_metric_history(run_id, key)]
    return pd.DataFrame(rows, columns=["run_id", "key", "step", "timestamp", "value"])


# ---------------------------------------------------------------- records


def _artifact_roots(client: MlflowClient, run_ids: Sequence[str]) -> dict[str, str]:
    """run_id -> artifact URI, from search_runs (no per-run get_run); unknown ids raise."""
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    roots: dict[str, str] = {}
    for start in range(0, len(run_ids), _SQL_CHUNK):
        chunk = ",".join(f"'{r}'" for r in run_ids[start:start + _SQL_CHUNK])
        for run in client.search_runs(experiment_ids, f"attributes.run_id IN ({chunk})",
                                      max_results=_SQL_CHUNK):
            roots[run.info.run_id] = run.info.artifact_uri
    missing = [r for r in run_ids if r not in roots]
    if missing:
        raise ValueError(f"run ids {missing[:5]} not found in the tracking store")
    return roots


def _artifact_roots_sql(db: str, run_ids: Sequence[str]) -> dict[str, str]:
    """run_id -> artifact URI read from the ``runs`` table (read-only, one query per chunk):
    ``search_runs`` would build every run's params, tags and metrics just for this column,
    which is most of the time of loading the records of a 10,000-run study."""
    roots: dict[str, str] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for start in range(0, len(run_ids), _SQL_CHUNK):
            chunk = list(run_ids[start:start + _SQL_CHUNK])
            rows = conn.execute("SELECT run_uuid, artifact_uri FROM runs WHERE run_uuid IN "
                                f"({','.join('?' * len(chunk))})", chunk)
            roots.update(rows)
    missing = [r for r in run_ids if r not in roots]
    if missing:
        raise ValueError(f"run ids {missing[:5]} not found in the tracking store")
    return roots


def _record_files(artifact_uri: str, wanted: set[int] | None, scratch: Path) -> list[Path]:
    """Local paths of a run's record files (sorted by step, filtered to ``wanted``).

    Local artifact roots are globbed in place; remote ones are listed through their
    artifact repository and only the wanted files are downloaded into ``scratch``.
    """
    if artifact_uri.startswith("file:") or "://" not in artifact_uri:
        folder = Path(local_file_uri_to_path(artifact_uri)) / "records"
        return [folder / n for n in _pick([p.name for p in folder.glob("*.parquet")], wanted)]
    return _download_record_files(get_artifact_repository(artifact_uri), wanted, scratch)


def _download_record_files(repo, wanted: set[int] | None, scratch: Path) -> list[Path]:
    """List ``records/`` in an artifact repository and download the wanted files."""
    names = [Path(info.path).name for info in repo.list_artifacts("records") if not info.is_dir]
    return [Path(repo.download_artifacts(f"records/{name}", str(scratch)))
            for name in _pick(names, wanted)]


def _pick(names: Iterable[str], wanted: set[int] | None) -> list[str]:
    """Record file names, sorted by step, restricted to the ``wanted`` steps."""
    steps = {name: int(m.group(1)) for name in names if (m := _RECORD_FILE.search(name))}
    return [n for n, step in sorted(steps.items(), key=lambda kv: kv[1])
            if wanted is None or step in wanted]
