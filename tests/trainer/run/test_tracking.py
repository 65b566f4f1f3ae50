"""trainer.tracking: store defaults, tags/params/config.json, batched metrics, failure path,
retry on "database is locked", concurrent writers on one sqlite file."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from trainer.config import RunConfig, apply_overrides, flatten, to_dict
from trainer.run.resolve import resolve
from trainer.run.store import git_sha, tracking_uri, with_retry
from trainer.run.tracking import RunLogger, cell_id, truncate


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One sqlite store for the module (creating MLflow's schema costs seconds)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlruns.db'}"
    RunLogger(uri)
    return uri


def _cfg(tmp_path, uri: str = "", **over) -> RunConfig:
    cfg = apply_overrides(RunConfig(), {"algo.method": "seed", "seed": 3, **over})
    return replace(cfg, output=replace(cfg.output, dir=str(tmp_path / "out")),
                   tracking=replace(cfg.tracking, uri=uri))


def _logger(cfg) -> RunLogger:
    return RunLogger(tracking_uri(cfg), cfg.tracking.experiment)


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _cfg(tmp_path)
    assert tracking_uri(cfg) == f"sqlite:///{tmp_path / 'out' / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert tracking_uri(cfg) == "sqlite:///elsewhere.db"
    cfg = replace(cfg, tracking=replace(cfg.tracking, uri="http://127.0.0.1:5000"))
    assert tracking_uri(cfg) == "http://127.0.0.1:5000"


def test_git_sha_inside_and_outside_git(tmp_path):
    assert git_sha(tmp_path) == "unknown"
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    assert git_sha(repo) == head.strip() and len(head.strip()) == 40


def test_cell_id_ignores_seed_tracking_output_only(tmp_path):
    a = _cfg(tmp_path)
    b = replace(_cfg(tmp_path / "x", seed=7), tracking=replace(a.tracking, study="s"))
    assert cell_id(a) == cell_id(b) and len(cell_id(a)) == 12
    assert cell_id(a) != cell_id(_cfg(tmp_path, **{"algo.beta_opd": 1.0}))
    # None = method default and the explicit default are the same cell (ids hash resolve(cfg))
    assert cell_id(a) == cell_id(_cfg(tmp_path, **{"algo.lambda_opd": 0.01}))


def test_a_field_added_later_keeps_the_ids_of_cells_at_its_default(tmp_path):
    """A cell that keeps an added field's default hashes as if the field did not exist (the
    ids of studies recorded before it), and one that sets it is a new cell."""
    import hashlib

    from trainer.config import canonical_json
    from trainer.run.resolve import resolve
    from trainer.run.tracking import ADDED_FIELDS, CELL_EXCLUDE

    cfg = _cfg(tmp_path)
    before = canonical_json(resolve(cfg), exclude=CELL_EXCLUDE + tuple(ADDED_FIELDS))
    assert cell_id(cfg) == hashlib.sha256(before.encode()).hexdigest()[:12]
    assert cell_id(cfg) != cell_id(_cfg(tmp_path, **{"writer.constrained": True}))
    assert cell_id(cfg) != cell_id(_cfg(tmp_path, **{"model.lora.rank": 4}))


def test_auto_dtype_keeps_the_ids_of_cpu_cells_and_is_bfloat16_on_a_gpu(tmp_path, monkeypatch):
    """model.dtype and model.vllm.enforce_eager default to auto, resolved on the run's device:
    on a CPU to the old defaults (float32, eager), so a CPU cell's id is the one it had when
    float32 was the default; on a GPU to bfloat16 and CUDA graphs, a cell of its own."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = _cfg(tmp_path)
    assert (cfg.model.dtype, cfg.model.vllm.enforce_eager) == ("auto", "auto")
    assert (resolve(cfg).model.dtype, resolve(cfg).model.vllm.enforce_eager) == ("float32", True)
    assert cell_id(cfg) == cell_id(_cfg(tmp_path, **{"model.dtype": "float32"}))
    assert cell_id(cfg) == "8e2c8b60d061"  # this config's id when float32 was the default
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert (resolve(cfg).model.dtype, resolve(cfg).model.vllm.enforce_eager) == ("bfloat16", False)
    assert cell_id(cfg) == cell_id(_cfg(tmp_path, **{"model.dtype": "bfloat16"})) != \
        cell_id(_cfg(tmp_path, **{"model.dtype": "float32"}))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)  # a GPU without bfloat16
    assert resolve(cfg).model.dtype == "float32"
    cpu = _cfg(tmp_path, **{"model.device": "cpu"})  # a named device: the same on every machine
    assert (resolve(cpu).model.dtype, resolve(cpu).model.vllm.enforce_eager) == ("float32", True)


def test_start_logs_tags_params_and_config(tmp_path, store):
    cfg = _cfg(tmp_path, store)
    logger = _logger(cfg)
    run_id = logger.start(cfg, tags={"extra": "1"})
    logger.finish()
    run = MlflowClient(tracking_uri(cfg)).get_run(run_id)
    tags = run.data.tags
    assert {k: tags[k] for k in ("method", "env", "backbone", "seed", "hindsight.kind", "extra")} \
        == {"method": "seed", "env": "household", "backbone": "tiny", "seed": "3",
            "hindsight.kind": "trial", "extra": "1"}
    assert tags["cell_id"] == cell_id(cfg) and tags["git_sha"]
    expected = {k: str(v) for k, v in flatten(resolve(cfg)).items()}
    assert run.data.params == expected
    assert run.data.params["algo.lambda_opd"] == "0.01"  # resolved SEED default was logged
    art = tmp_path / "dl"
    MlflowClient(tracking_uri(cfg)).download_artifacts(run_id, "config.json", str(art))
    assert json.loads((art / "config.json").read_text()) == to_dict(cfg)
    assert run.info.status == "FINISHED"
    # artifacts live next to the sqlite store, not in ./mlruns of the current folder
    assert run.info.artifact_uri.startswith(Path(store[len("sqlite:///"):]).parent.as_uri())


def test_metrics_one_log_batch_per_step(tmp_path, store, monkeypatch):
    cfg = _cfg(tmp_path, store)
    logger = _logger(cfg)
    run_id = logger.start(cfg)
    calls = []
    real = logger.client.log_batch
    monkeypatch.setattr(logger.client, "log_batch",
                        lambda rid, metrics=(), **kw: calls.append(len(metrics)) or real(rid, metrics=metrics, **kw))
    logger.log_metrics(0, {"train/success": 0.5})
    logger.log_metrics(0, {"adv/mean": 0.0, "train/success": 0.25})  # same step: merged
    assert calls == []
    logger.log_metrics(1, {"train/success": 1.0})
    assert calls == [2]  # step 0 flushed in one call with both keys
    logger.log_metrics(2, {f"m/{i}": float(i) for i in range(1500)})
    logger.finish()
    assert calls == [2, 1, 1000, 500]  # 1500 metrics exceed log_batch's 1000 limit
    client = MlflowClient(tracking_uri(cfg))
    hist = client.get_metric_history(run_id, "train/success")
    assert [(m.step, m.value) for m in hist] == [(0, 0.25), (1, 1.0)]
    assert client.get_metric_history(run_id, "m/1499")[0].value == 1499.0


def test_long_param_truncated_and_changed_param_rejected(tmp_path, store):
    assert truncate("abc", 5) == "abc" and truncate("abcdefgh", 5) == "ab..."
    cfg = _cfg(tmp_path, store)
    logger = _logger(cfg)
    run_id = logger.start(cfg)
    logger.log_params({"long": "x" * 7000})
    value = MlflowClient(tracking_uri(cfg)).get_run(run_id).data.params["long"]
    assert len(value) == 6000 and value.endswith("...")
    with pytest.raises(ValueError, match="algo.beta_opd"):
        logger.log_params({"algo.beta_opd": 9.0})


def test_exception_marks_failed_with_traceback_then_resume_same_run(tmp_path, store):
    cfg = _cfg(tmp_path, store)
    logger = _logger(cfg)
    run_id = logger.start(cfg)
    with pytest.raises(ZeroDivisionError), logger:
        logger.log_metrics(0, {"train/success": 0.5})
        1 / 0  # noqa: B018 - raises inside the logger's context
    client = MlflowClient(tracking_uri(cfg))
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert client.get_metric_history(run_id, "train/success")[0].value == 0.5  # flushed
    text = (tmp_path / "tb")
    client.download_artifacts(run_id, "traceback.txt", str(text))
    assert "ZeroDivisionError" in (text / "traceback.txt").read_text()
    again = _logger(cfg)
    assert again.start(cfg, run_id=run_id) == run_id  # same params: no error
    assert client.get_run(run_id).info.status == "RUNNING"
    again.finish()
    assert [r.info.run_id for r in client.search_runs(
        [run.info.experiment_id], filter_string=f"attributes.run_id = '{run_id}'")] == [run_id]


def test_with_retry_only_retries_locked():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert with_retry(flaky) == "ok" and len(calls) == 3
    calls.clear()

    def broken():
        calls.append(1)
        raise RuntimeError("no such table")

    with pytest.raises(RuntimeError, match="no such table"):
        with_retry(broken)
    assert len(calls) == 1
    with pytest.raises(RuntimeError, match="locked"):
        with_retry(lambda: (_ for _ in ()).throw(RuntimeError("database is locked")), attempts=2)


def _writer(uri: str, name: str, steps: int, queue) -> None:
    cfg = RunConfig()
    cfg = replace(cfg, tracking=replace(cfg.tracking, uri=uri, run_name=name))
    logger = RunLogger(uri)
    run_id = logger.start(cfg)
    for step in range(steps):
        logger.log_metrics(step, {f"k{i}": step + i for i in range(8)})
        logger.flush()
    logger.finish()
    queue.put(run_id)


def test_concurrent_writers_lose_no_metrics(store):
    uri = store  # schema created once, as the sweep driver does
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(uri, f"w{i}", 25, queue)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    client = MlflowClient(uri)
    run_ids = [queue.get(timeout=5) for _ in procs]
    for run_id in run_ids:
        for i in range(8):
            hist = client.get_metric_history(run_id, f"k{i}")
            assert sorted((m.step, m.value) for m in hist) == [(s, float(s + i)) for s in range(25)]


def _logged_text(client: MlflowClient, run_id: str, tmp_path: Path) -> str:
    """Every param, tag and text artifact of a run, as one string."""
    run = client.get_run(run_id)
    parts = [f"{k}={v}" for k, v in {**run.data.params, **run.data.tags}.items()]
    where = Path(client.download_artifacts(run_id, "", str(tmp_path / f"dl-{run_id}")))
    parts += [p.read_text(errors="replace") for p in where.rglob("*") if p.is_file()]
    return "\n".join(parts)


@pytest.mark.parametrize("pasted", [False, True])
def test_external_writer_api_key_is_never_logged(tmp_path, store, monkeypatch, pasted):
    """The key (in its env var, or pasted into api_key_env by mistake) appears in no param,
    tag or artifact, not even in an error's traceback that quotes it."""
    key = "sk-test-4f9a0c1e7b2d"
    monkeypatch.setenv("HS_TEST_WRITER_KEY", key)
    cfg = _cfg(tmp_path, store, **{"writer.kind": "external", "writer.endpoint": "http://127.0.0.1:9/v1",
                                   "writer.api_key_env": key if pasted else "HS_TEST_WRITER_KEY"})
    logger = _logger(cfg)
    run_id = logger.start(cfg, tags={"note": f"Bearer {key}"})
    logger.set_tags({"endpoint_auth": f"Authorization: Bearer {key}"})
    logger.log_text(f"request failed with key {key}", "skills/step_000000.txt")
    logger.fail(RuntimeError(f"401 Unauthorized for key {key}"))
    text = _logged_text(MlflowClient(store), run_id, tmp_path)
    assert key not in text
    assert "401 Unauthorized for key ***" in text and "Bearer ***" in text  # the rest is kept
    params = MlflowClient(store).get_run(run_id).data.params
    assert params["writer.api_key_env"] == ("***" if pasted else "HS_TEST_WRITER_KEY")
