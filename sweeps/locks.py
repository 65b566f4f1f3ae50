"""Locks shared by every driver of a study, so that several drivers (on one machine or on
many) can feed one study: one parent run, and each (cell, seed) trained once.

Where the study has a PostgreSQL database (its Optuna storage, else its MLflow store), the
lock is a PostgreSQL advisory lock: every machine that reaches the database shares it, and
the database releases it when the holder's connection ends (a killed driver or worker
leaves no stale lock).  Otherwise it is an ``flock`` on a file under ``<out>/locks``, which
the processes of one machine (or of a shared file system with working locks) share.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path

from sweeps.study import Study
from trainer.run.store import POSTGRES_SCHEMES, db_lock


def lock_url(study: Study) -> str:
    """The PostgreSQL URL whose advisory locks the study's drivers share ("" = file locks)."""
    candidates = [study.search.storage if study.search is not None else "", study.store_uri]
    return next((url for url in candidates if url.startswith(POSTGRES_SCHEMES)), "")


def _lock_key(study: Study, name: str) -> int:
    digest = hashlib.sha256(f"hindsight/{study.name}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def study_lock(study: Study, name: str) -> Iterator[None]:
    """Hold the study-wide lock ``name`` (e.g. ``"parent"``, ``"<cell>-s<seed>"``) while the
    block runs; blocks until the holder releases it."""
    url = lock_url(study)
    if url:
        with db_lock(url, f"{study.name}/{name}"):
            yield
        return
    path = Path(study.out_dir) / "locks" / f"{_lock_key(study, name) & 0xFFFFFFFFFFFF:012x}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
