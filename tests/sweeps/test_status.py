"""sweeps.status without Ray: the cells x seeds table names each cell by the values that set
it apart (rounded), for grids and Optuna searches; `hindsight ui` serves one worker, prints
direct links, and stops its whole server on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from support.paths import ROOT
from sweeps.status import study_links, study_status, ui_argv
from sweeps.study import describe_overrides, distinguishing, load_study
from sweeps.trial_runs import ensure_parent
from sweeps.trials import expand
from trainer.config import ConfigError, flatten
from trainer.run.resolve import resolve
from trainer.run.store import experiment_id, make_client
from trainer.run.tracking import run_tags


def _study(tmp_path: Path, **data):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "st", "base": {"model": {"backbone": "tiny"}},
                                    "out": "out", **data}))
    return load_study(path)


def test_describe_rounds_floats_and_keeps_the_rest():
    assert describe_overrides({"algo.beta_opd": 4.619905512862269, "algo.method": "seed",
                               "rollout.group_size": 8}) == (
        "algo.beta_opd=4.62, algo.method=seed, rollout.group_size=8")
    assert describe_overrides([("algo.lambda_opd", 0.00123456)]) == "algo.lambda_opd=0.001235"
    assert describe_overrides({"a": 2.0, "b": 1e-05, "c": 123456.0}) == "a=2.0, b=1e-05, c=1.235e+05"


def test_distinguishing_keeps_only_the_keys_that_vary():
    cells = [{"a": 1, "b": 2.0}, {"a": 1, "b": 3.0}]
    assert distinguishing(cells) == [{"b": 2.0}, {"b": 3.0}]
    assert distinguishing([{"a": 1}]) == [{"a": 1}]


def test_grid_status_shows_the_axes_that_differ(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = _study(tmp_path, grid={"algo.method": ["grpo", "seed"], "algo.beta_opd": [5.0],
                                   "seed": [0, 1]})
    text = study_status(study).format()
    cells = {t.cell_id: dict(t.overrides)["algo.method"] for t in expand(study)}
    for cid, method in cells.items():
        assert f"{cid} algo.method={method}  " in text
    assert "beta_opd" not in text and "0 finished, 0 running, 0 failed, 4 missing" in text


def test_search_status_shows_rounded_suggested_values(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    search = {"space": {"algo.beta_opd": {"type": "float", "low": 1.0, "high": 8.0}}, "trials": 2}
    study = _study(tmp_path, search=search)
    client = make_client(study.store_uri)
    exp = experiment_id(client, study.experiment)
    for beta in (4.619905512862269, 1.0000001):
        cfg = resolve(expand_one(study, beta))
        run = client.create_run(exp, tags=run_tags(cfg))
        client.log_batch(run.info.run_id, params=[
            __import__("mlflow").entities.Param(k, str(v)) for k, v in flatten(cfg).items()])
        client.set_terminated(run.info.run_id)
    lines = study_status(study).format().splitlines()
    assert any(line.split()[1:2] == ["algo.beta_opd=4.62"] for line in lines), lines
    assert any(line.split()[1:2] == ["algo.beta_opd=1.0"] for line in lines), lines
    assert lines[-1] == "2 finished, 0 running, 0 failed, 0 missing"


def expand_one(study, beta):
    from sweeps.trials import make_trial

    return make_trial(study, {"algo.beta_opd": beta}, 0).cfg


# --------------------------------------------------------------------------- hindsight ui


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def listening_hosts(port: int) -> set[str]:
    """The local addresses that listen on TCP ``port`` (``ss``), e.g. {"127.0.0.1"}."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()}


def test_ui_argv_one_worker_and_links(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = _study(tmp_path, grid={"algo.method": ["grpo"]})
    argv = ui_argv(study, 5123)
    assert argv[argv.index("--workers") + 1] == "1"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # this machine only, unless told
    assert ui_argv(study, 5123, host="0.0.0.0")[argv.index("--host") + 1] == "0.0.0.0"
    server = ui_argv(study, 5123, backend="postgresql://hs:pw@127.0.0.1:5432/db")
    assert server[2:4] == ["mlflow", "server"] and "--serve-artifacts" in server
    assert server[server.index("--host") + 1] == "127.0.0.1"
    assert server[server.index("--artifacts-destination") + 1] == str(study.out_dir / "artifacts")
    http = _study(tmp_path, grid={"algo.method": ["grpo"]}, tracking_uri="http://u:secret@h:5000")
    with pytest.raises(ConfigError, match=r"tracking server at http://u:\*\*\*@h:5000"):
        ui_argv(http, 5123)
    assert study_links(study, "http://h") == []  # nothing launched: no store created
    assert not (study.out_dir / "mlruns.db").exists()
    client = make_client(study.store_uri)
    exp = experiment_id(client, study.experiment)
    parent = ensure_parent(client, exp, study)
    assert study_links(study, "http://h") == [
        f"runs of study st: http://h/#/experiments/{exp}/runs",
        f"study run (report under Artifacts): http://h/#/experiments/{exp}/runs/{parent}"]


@pytest.mark.slow
def test_ui_serves_then_sigterm_closes_the_port(tmp_path, monkeypatch):
    """`hindsight ui` on a real store: it answers HTTP, prints the runs link and no
    deprecation warnings; SIGTERM to the command stops MLflow's server and its workers."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = _study(tmp_path, grid={"algo.method": ["grpo"]})
    client = make_client(study.store_uri)
    ensure_parent(client, experiment_id(client, study.experiment), study)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "sweeps.cli", "ui", str(study.path), "--port",
                             str(port)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not _port_open(port):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as reply:
            assert reply.status == 200
        assert listening_hosts(port) == {"127.0.0.1"}  # not 0.0.0.0: this machine only
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert f"runs of study st: http://127.0.0.1:{port}/#/experiments/" in out
    assert "DeprecationWarning" not in err and "FutureWarning" not in err, err
    deadline = time.time() + 15
    while time.time() < deadline and _port_open(port):
        time.sleep(0.5)
    assert not _port_open(port), "the MLflow server still serves the port after SIGTERM"
