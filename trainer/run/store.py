"""The MLflow store every part of the project talks to: which store a run logs to,
a client that survives a busy sqlite database (retries) and a lock for the
experiments and tables shared by concurrent writers, the git revision of a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from trainer.config import RunConfig

T = TypeVar("T")


# MLflow 3's UI opens an experiment without this tag in its GenAI (traces) view; training
# runs belong in its model-training view (the runs table, charts, artifacts).
EXPERIMENT_KIND_TAGS = {"mlflow.experimentKind": "custom_model_development"}


_LOCKED = ("database is locked", "database table is locked")


def tracking_uri(cfg: RunConfig) -> str:
    """The store a run logs to: cfg.tracking.uri, else $MLFLOW_TRACKING_URI, else
    ``sqlite:///<abs output.dir>/mlruns.db``."""
    if cfg.tracking.uri:
        return cfg.tracking.uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return sqlite_uri(Path(cfg.output.dir) / "mlruns.db")


def sqlite_uri(db_path: str | Path) -> str:
    """``sqlite:///`` URI of an absolute path."""
    return f"sqlite:///{Path(db_path).expanduser().resolve()}"


def with_retry(fn: Callable[..., T], *args: Any, attempts: int = 12, **kwargs: Any) -> T:
    """Call ``fn`` and retry with jittered exponential back-off while sqlite reports
    "database is locked" (sqlite's own 5 s busy timeout already elapsed by then).  Other
    errors propagate at once; the last locked error propagates after ``attempts`` tries."""
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # MlflowException or sqlalchemy OperationalError
            if attempt == attempts - 1 or not any(s in str(exc) for s in _LOCKED):
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def artifact_root(uri: str) -> str | None:
    """``<db folder>/artifacts`` as a file URI for a sqlite store (None for other stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///"):]).parent / "artifacts").as_uri()


POSTGRES_SCHEMES = ("postgresql://", "postgresql+", "postgres://")


@contextlib.contextmanager
def db_lock(url: str, name: str):
    """Hold the PostgreSQL advisory lock ``name`` of the database at ``url`` while the block
    runs (every client of that database shares it; the database releases it if the holder's
    connection dies).  Not a PostgreSQL URL: no lock."""
    if not url.startswith(POSTGRES_SCHEMES):
        yield
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    key = int.from_bytes(hashlib.sha256(f"hindsight/{name}".encode()).digest()[:8], "big", signed=True)
    engine = sqlalchemy.create_engine(url.replace("postgres://", "postgresql://", 1), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
    finally:
        engine.dispose()


def make_client(uri: str) -> MlflowClient:
    """A client whose store is open.  For a sqlite file, opening (which creates or migrates
    MLflow's schema) holds an exclusive lock on ``<db>.lock`` so that processes opening a
    fresh store at once do not race on the schema (a PostgreSQL store: an advisory lock); a
    fresh store is created with its artifact root beside the database, so that even
    MLflow's ``Default`` experiment points inside the study folder (MLflow's own default is
    ``./mlruns`` of the current folder)."""

    def connect() -> MlflowClient:
        if root is not None and not db.exists():
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            SqlAlchemyStore(uri, root)  # creates the schema and the Default experiment
        client = MlflowClient(tracking_uri=uri)
        client._tracking_client.store  # noqa: B018 - opens the store (creates the schema)
        return client

    root = artifact_root(uri)
    if root is None:  # a database's schema is created once, under its advisory lock
        with db_lock(uri, "mlflow-schema"):
            return with_retry(connect)
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return with_retry(connect)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def experiment_id(client: MlflowClient, name: str) -> str:
    """Get or create the experiment ``name`` (tagged as a model-training experiment for the
    MLflow UI).  For a sqlite store the artifacts go to
    ``<db folder>/artifacts`` (MLflow's default would be ./mlruns of the current folder)."""
    exp = with_retry(client.get_experiment_by_name, name)
    if exp is not None:
        return exp.experiment_id
    location = artifact_root(client.tracking_uri)
    try:
        return with_retry(client.create_experiment, name, artifact_location=location,
                          tags=EXPERIMENT_KIND_TAGS)
    except MlflowException:  # created concurrently by another process
        exp = with_retry(client.get_experiment_by_name, name)
        if exp is None:
            raise
        return exp.experiment_id


@functools.lru_cache(maxsize=8)
def git_sha(cwd: str | Path | None = None) -> str:
    """``git rev-parse HEAD`` of ``cwd`` (default: this repository); "unknown" outside git."""
    where = cwd if cwd is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else "unknown"
