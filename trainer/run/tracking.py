"""MLflow run logger for training runs (and the helpers sweeps use to address the store).

Layout of a training run (DESIGN.md "Tracking"):

* tags ``study``, ``cell_id``, ``method``, ``env``, ``backbone``, ``seed``, ``git_sha``,
  ``hindsight.kind`` (``"trial"``; a study's parent run uses ``"study"``),
  ``hindsight.checkpoints`` (the checkpoint folder) and ``mlflow.parentRunId`` when the run
  belongs to a study;
* params ``flatten(resolve(cfg))`` (values longer than MLflow's limit are truncated) and
  ``plugins.sha``, the source hash of each plugin the config names;
* metrics buffered per step and written with one ``log_batch`` call per step;
* artifacts ``config.json``, ``checkpoint/`` (the final checkpoint, with
  ``output.log_checkpoints``) and, on an exception, ``traceback.txt`` with status FAILED.

The store defaults to ``sqlite:///<output.dir>/mlruns.db`` unless ``cfg.tracking.uri`` or
``$MLFLOW_TRACKING_URI`` names another one.  Every store call is retried on sqlite's
"database is locked" so that concurrent trials writing to one file lose nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.utils.validation import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VAL_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
)

from trainer import plugins
from trainer.algos import get_method
from trainer.config import LORA_TARGETS, RunConfig, canonical_json, flatten, to_dict
from trainer.run.resolve import resolve
from trainer.run.store import experiment_id, git_sha, make_client, with_retry

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


KIND_TAG = "hindsight.kind"


CHECKPOINTS_TAG = "hindsight.checkpoints"


NOTE_TAG = "mlflow.note.content"  # the run/experiment description shown by the MLflow UI


PARENT_TAG = "mlflow.parentRunId"


TERMINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")


# What a cell is not: the seed (the seed axis), where a run logs and writes, and settings that
# change where and how fast it computes but not its results (the vLLM engine, the
# micro-batch size, the external writer's concurrency, the data-parallel ranks), so a
# relaunch keeps its cells; and where plugins are (their sources' hashes enter instead).
CELL_EXCLUDE = ("seed", "tracking", "output", "stages.warm_start.cache", "stages.warm_start.cache_dir",
                "model.vllm", "algo.micro_batch_size", "algo.micro_batch_tokens", "writer.concurrency",
                "parallel", "plugins")


# Fields added to the config after studies were recorded, with the default those studies ran
# at: a cell that keeps the default hashes as it did before the field existed, so a study
# extended with the new setting continues (its finished trials are skipped, not rerun).
ADDED_FIELDS = {"writer.constrained": False, "stages.skill_sft.replay": 0.0,
                "stages.skill_sft.replay_batch": 8, "model.lora.rank": 0, "model.lora.alpha": 16.0,
                "model.lora.dropout": 0.0, "model.lora.target_modules": LORA_TARGETS,
                "env.hidden_cards": 0, "env.hands": 1, "writer.prompt": "analyzer", "stages.skill_sft.writer_panel": 64,
                "rollout.task_draw": "uniform"}


def cell_id(cfg: RunConfig) -> str:
    """Short stable hash of the resolved config without seed, tracking and output: runs
    that differ only by seed share a cell.  The source hash of each plugin whose method, env
    or writer prompt the run uses enters it (:func:`trainer.plugins.used_plugins`), so a
    changed plugin never resumes the trials of the old one."""
    resolved = resolve(cfg)
    flat = flatten(resolved)
    unset = tuple(k for k, default in ADDED_FIELDS.items() if flat[k] == default)
    text = canonical_json(resolved, exclude=CELL_EXCLUDE + unset)
    sources = [p.sha for p in plugins.used_plugins(resolved)]
    if sources:
        text += "|plugins:" + ",".join(sources)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def method_writer(method: str) -> str:
    """The writer kind the method's table entry gives (``""`` for an unregistered name)."""
    try:
        return get_method(method).writer
    except (KeyError, ValueError):
        return ""


def run_tags(cfg: RunConfig, kind: str = "trial") -> dict[str, str]:
    """The contract tags of a training run built from its config."""
    tags = {
        "study": cfg.tracking.study,
        "cell_id": cell_id(cfg),
        "method": cfg.algo.method,
        "env": cfg.env.name,
        "backbone": cfg.model.backbone,
        "seed": str(cfg.seed),
        # the method's own writer (its paper's setting): reports name a run's writer where
        # writer.kind differs from it
        "method_writer": method_writer(cfg.algo.method),
        "git_sha": git_sha(),
        KIND_TAG: kind,
        CHECKPOINTS_TAG: str(Path(cfg.output.dir).expanduser().resolve() / "checkpoints"),
    }
    if cfg.tracking.parent_run_id:
        tags[PARENT_TAG] = cfg.tracking.parent_run_id
    return tags


ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


REDACTED = "***"


def secret_values(cfg: RunConfig) -> tuple[str, ...]:
    """Strings a run must never log: the external writer's API key (the value of the
    environment variable ``writer.api_key_env`` names) and ``api_key_env`` itself when it is
    not a variable name (a key pasted in its place).  Short values (< 4 characters) are not
    treated as secrets: replacing them everywhere would mangle ordinary text."""
    name = cfg.writer.api_key_env or ""
    values = [os.environ.get(name, "")] if ENV_NAME_RE.fullmatch(name) else [name]
    return tuple(sorted({v for v in values if len(v) >= 4}, key=len, reverse=True))


def redact(value: Any, secrets: tuple[str, ...]) -> str:
    """``str(value)`` with every secret replaced by ``***``."""
    text = str(value)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def redact_url(uri: str) -> str:
    """``uri`` without its password (``postgresql://user:***@host/db``), for messages."""
    return re.sub(r"(://[^/:@]*):[^/@]*@", r"\1:***@", uri)


def truncate(value: Any, limit: int = MAX_PARAM_VAL_LENGTH) -> str:
    """``str(value)`` cut to ``limit`` characters, ending in "..." when cut."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RunLogger:
    """Logs one MLflow run through ``MlflowClient`` (works from any process).

    Usage::

        logger = RunLogger(tracking_uri(cfg), cfg.tracking.experiment)
        run_id = logger.start(cfg, run_id=resume_id)
        with logger:                # FINISHED on exit; FAILED + traceback.txt on exception
            logger.log_metrics(step, {"train/success": 0.5})
    """

    def __init__(self, uri: str, experiment: str = "hindsight") -> None:
        self.uri = uri
        self.experiment = experiment
        self.client = make_client(uri)
        self.run_id: str | None = None
        self._step: int | None = None
        self._buffer: dict[str, float] = {}
        # Never logged as a param, tag or text artifact (set by start from the config).
        self.secrets: tuple[str, ...] = ()

    # -- lifecycle
    def start(
        self, cfg: RunConfig, run_id: str | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        """Create a run in the experiment (or continue ``run_id``, setting it RUNNING), set
        the contract tags plus ``tags``, log params and ``config.json``; return the run id.
        The external writer's API key (:func:`secret_values`) is redacted from all of them."""
        self.secrets = secret_values(cfg)
        all_tags = {k: redact(v, self.secrets) for k, v in {**run_tags(cfg), **(tags or {})}.items()}
        if run_id is None:
            exp = experiment_id(self.client, self.experiment)
            run = with_retry(
                self.client.create_run, exp, tags=all_tags, run_name=cfg.tracking.run_name or None
            )
            self.run_id = run.info.run_id
        else:
            with_retry(self.client.get_run, run_id)  # raises if the id is unknown
            self.run_id = run_id
            with_retry(self.client.update_run, run_id, status="RUNNING")
            self._log_batch(tags=[RunTag(k, truncate(v, MAX_TAG_VAL_LENGTH)) for k, v in all_tags.items()])
        self.log_params({**flatten(resolve(cfg)), **plugins.plugin_params(cfg)})
        self.log_dict(to_dict(cfg), "config.json")
        return self.run_id

    def finish(self, status: str = "FINISHED") -> None:
        """Flush buffered metrics and set the terminal status."""
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"status {status!r} is not terminal; valid: {', '.join(TERMINAL_STATUSES)}")
        self.flush()
        with_retry(self.client.set_terminated, self._id(), status=status)

    def fail(self, exc: BaseException) -> None:
        """Log the exception's traceback as ``traceback.txt`` and finish FAILED."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            self.flush()
        finally:
            self.log_text(text, "traceback.txt")
            with_retry(self.client.set_terminated, self._id(), status="FAILED")

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.finish("FINISHED")
        else:
            self.fail(exc)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._log_batch(tags=[RunTag(k, truncate(redact(v, self.secrets), MAX_TAG_VAL_LENGTH))
                              for k, v in tags.items()])

    # -- params and metrics
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log scalar params (values truncated to MLflow's 6000-char limit).  Params already
        logged with the same value are skipped (a resumed run); a changed value raises."""
        existing = with_retry(self.client.get_run, self._id()).data.params
        new = {k: truncate(redact(v, self.secrets)) for k, v in params.items()}
        changed = sorted(k for k, v in new.items() if k in existing and existing[k] != v)
        if changed:
            raise ValueError(f"run {self.run_id} already has different values for params {changed}")
        todo = [Param(k, v) for k, v in new.items() if k not in existing]
        for i in range(0, len(todo), MAX_PARAMS_TAGS_PER_BATCH):
            self._log_batch(params=todo[i : i + MAX_PARAMS_TAGS_PER_BATCH])

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Buffer ``metrics`` for ``step``; moving to another step flushes the previous one,
        so each step costs one ``log_batch`` (split in chunks of 1000 metrics beyond that)."""
        if self._step is not None and step != self._step:
            self.flush()
        self._step = step
        self._buffer.update({k: float(v) for k, v in metrics.items()})

    def flush(self) -> None:
        """Write the buffered step's metrics (no-op when the buffer is empty)."""
        if not self._buffer:
            return
        now = int(time.time() * 1000)
        items = [Metric(k, v, now, self._step) for k, v in self._buffer.items()]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            self._log_batch(metrics=items[i : i + MAX_METRICS_PER_BATCH])
        self._buffer = {}

    # -- artifacts
    def log_text(self, text: str, artifact_file: str) -> None:
        with_retry(self.client.log_text, self._id(), redact(text, self.secrets), artifact_file)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self.log_text(json.dumps(data, indent=2, sort_keys=True, default=str), artifact_file)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        with_retry(self.client.log_artifact, self._id(), str(local_path), artifact_path)

    def log_artifacts(self, local_dir: str | Path, artifact_path: str | None = None) -> None:
        """Log every file under ``local_dir`` (a checkpoint folder, a report)."""
        with_retry(self.client.log_artifacts, self._id(), str(local_dir), artifact_path)

    # -- internals
    def _id(self) -> str:
        if self.run_id is None:
            raise RuntimeError("RunLogger.start() must be called before logging")
        return self.run_id

    def _log_batch(self, **batch: Any) -> None:
        with_retry(self.client.log_batch, self._id(), **batch)
