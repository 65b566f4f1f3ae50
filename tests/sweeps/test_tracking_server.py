"""An MLflow tracking server on PostgreSQL (started by the fixtures on 127.0.0.1, artifacts
in a local folder): a study logs through its http URI with 4 trials at once and loses no
metric, param or artifact; the server restarted mid-study loses nothing either (the MLflow
client retries); `hindsight ui --backend-store-uri` serves the same database."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from support import sweeps_fakes as fakes
from support.paths import FAKES
from support.services import (
    Unavailable,
    free_port,
    mlflow_server,
    postgres,
    service_env,
    stop_session,
)
from sweeps.status import study_children
from sweeps.study import load_study
from trainer.config import flatten, from_dict
from trainer.run.resolve import resolve
from trainer.run.store import experiment_id, make_client
from trainer.run.tracking import truncate

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def pg():
    try:
        with postgres() as server:
            yield server
    except Unavailable as exc:
        pytest.skip(f"no PostgreSQL on this machine: {exc}")


@pytest.fixture(scope="module")
def server(pg, tmp_path_factory):
    backend = pg.create_db("mlflow")
    artifacts = tmp_path_factory.mktemp("server") / "artifacts"
    try:
        with mlflow_server(backend, artifacts) as uri:
            yield uri, backend, artifacts
    except Unavailable as exc:
        pytest.skip(f"mlflow server does not start here: {exc}")


@pytest.mark.slow  # about 100 s on 2 cores (four Ray trials through a server): .ci/run's slow phase
def test_four_concurrent_trials_through_the_server_lose_nothing(tmp_path, server):
    import ray

    from sweeps.ray_session import init_ray
    from sweeps.runner import run_study

    uri, _, artifacts = server
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "served", "base": {"model": {"backbone": "tiny"}}, "out": "out",
        "tracking_uri": uri, "grid": {"algo.beta_opd": [1.0, 2.0], "seed": [0, 1]},
        "resources": {"cpus": 0.25}, "max_concurrent": 4}))
    study = load_study(path)
    init_ray()
    try:
        status = run_study(study, train_fn=fakes.fake_train, echo=lambda _: None)
    finally:
        ray.shutdown()
    assert status.complete
    assert not (study.out_dir / "mlruns.db").exists()  # nothing went to a local store
    client = MlflowClient(uri)
    runs = [r for rs in study_children(study).values() for r in rs]
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    for run in runs:
        cfg = from_dict(json.loads(Path(client.download_artifacts(
            run.info.run_id, "config.json", str(tmp_path / run.info.run_id))).read_text()))
        assert run.data.params == {k: truncate(v) for k, v in flatten(resolve(cfg)).items()}
        for key in ("train/success", "train/score"):
            assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [0, 1, 2]
        assert run.data.metrics["eval/eval_unseen/success"] == fakes.fake_success(cfg)
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # served by the server
    stored = {p.name for p in artifacts.rglob("config.json")}
    assert len(list(artifacts.rglob("config.json"))) == 4 and stored == {"config.json"}
    assert list(artifacts.rglob("study.yaml"))  # the parent run's copy of the study file


def test_hindsight_ui_serves_a_postgresql_store(tmp_path, pg, server):
    """`hindsight ui STUDY --backend-store-uri postgresql://...` starts a tracking server on
    127.0.0.1 that lists the study's experiment; SIGTERM stops it."""
    _, backend, _ = server
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "served", "out": "out", "tracking_uri": backend,
                                    "grid": {"seed": [0]}}))
    experiment_id(make_client(backend), "served")  # the study's experiment, in the database
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "ui", str(path), "--port",
                             str(port), "--backend-store-uri", backend], cwd=tmp_path,
                            env=service_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline, reply = time.time() + 600, None
        while time.time() < deadline and reply is None:
            assert proc.poll() is None, proc.communicate()
            try:
                url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=100"
                with urllib.request.urlopen(url, timeout=5) as answer:
                    reply = json.load(answer)
            except OSError:
                time.sleep(1)
        assert reply is not None, "hindsight ui did not answer"
        assert "served" in {e["name"] for e in reply["experiments"]}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert f"runs of study served: http://127.0.0.1:{port}/#/experiments/" in out


@pytest.mark.slow  # about 40 s (a killed node or server and its recovery): .ci/run's slow phase
def test_server_restarted_mid_study_loses_nothing(tmp_path, pg):
    """The server goes away while two trials log (its process group stopped) and comes
    back on the same port and database: the clients' retries carry every step over."""
    backend, artifacts, port = pg.create_db("restart"), tmp_path / "artifacts", free_port()
    path = tmp_path / "study.yaml"
    uri = f"http://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump({
        "name": "restart", "base": {"model": {"backbone": "tiny"}}, "out": "out",
        "tracking_uri": uri, "grid": {"seed": [0, 1]}, "resources": {"cpus": 0.5},
        "max_concurrent": 2}))
    study = load_study(path)
    try:
        with mlflow_server(backend, artifacts, port):
            driver = subprocess.Popen([sys.executable, str(FAKES), str(path), "slow"],
                                      cwd=tmp_path, env=service_env(), start_new_session=True,
                                      text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            client, deadline = MlflowClient(uri), time.time() + 600
            while time.time() < deadline:  # until a trial has logged its first step
                runs = [r for rs in study_children(study).values() for r in rs]
                if any(client.get_metric_history(r.info.run_id, "train/success") for r in runs):
                    break
                assert driver.poll() is None, driver.communicate()[0][-3000:]
                time.sleep(0.5)
        assert driver.poll() is None, "the study ended before the server was stopped"
        with mlflow_server(backend, artifacts, port):  # back, same port and database
            output, _ = driver.communicate(timeout=900)
            assert driver.returncode == 0, output[-3000:]
            runs = [r for rs in study_children(study).values() for r in rs]
            assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
            for run in runs:
                steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/success")]
                assert sorted(steps) == list(range(6))
    except Unavailable as exc:
        pytest.skip(f"mlflow server does not start here: {exc}")
    finally:
        if "driver" in locals():
            stop_session(driver)
