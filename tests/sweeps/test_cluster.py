"""A study on a Ray cluster started outside it: `ray start --head` plus a second node
(`ray start --address`) on this machine, each with 2 CPUs, 1 declared GPU and its own custom
resources.  Trials land on both nodes (the run tag hindsight.node_id), per-trial GPU
fractions and custom resources are respected, and a driver killed mid-study is relaunched:
the finished trials are found, none is run twice; the second node killed mid-trial: its
trials are retried on the head and continue their runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from support import sweeps_fakes as fakes
from support.paths import FAKES
from support.services import Unavailable, ray_cluster, service_env, stop_session
from sweeps.status import pair_state, study_children
from sweeps.study import load_study

pytestmark = pytest.mark.services



@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import ray

    ray.shutdown()  # a local Ray of an earlier test module would take the address's place
    try:
        with ray_cluster(tmp_path_factory.mktemp("cluster"),
                         head_resources={"hs_slot": 1},
                         worker_resources={"hs_slot": 1, "hs_second_node": 1}) as running:
            yield running
            ray.shutdown()
    except Unavailable as exc:
        pytest.skip(f"no Ray cluster on this machine: {exc}")


def _study(tmp_path: Path, name: str, **data) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": {"model": {"backbone": "tiny"}},
                                    "out": f"out-{name}", **data}))
    return path


def _finished(study) -> list:
    runs = [r for rs in study_children(study).values() for r in rs]
    assert all(r.info.status == "FINISHED" for r in runs), [r.info.status for r in runs]
    return runs


@pytest.mark.slow  # about 60 s with the cluster's start and stop; its 2-s trials overlap (and so spill
# to the second node) only when Ray starts their processes in time, which a loaded machine does not
def test_trials_land_on_both_nodes_within_their_resources(tmp_path, cluster):
    from sweeps.runner import run_study

    # 0.5 GPU a trial: at most two at once on a node (by CPUs, eight would fit).
    gpu = load_study(_study(tmp_path, "gpu", grid={"seed": list(range(6))},
                            resources={"cpus": 0.25, "gpus": 0.5}))
    status = run_study(gpu, train_fn=fakes.node_train, address=cluster.address,
                       echo=lambda _: None)
    assert status.complete
    runs = _finished(gpu)
    assert len(runs) == 6
    assert {r.data.tags["hindsight.node_id"] for r in runs} == set(cluster.node_ids.values())
    assert max(r.data.metrics["node_concurrency"] for r in runs) <= 2
    assert {r.data.metrics["gpus_seen"] for r in runs} == {1}  # a fraction of one GPU

    # A custom resource only the second node has: every trial runs there, one at a time.
    custom = load_study(_study(tmp_path, "custom", grid={"seed": [0, 1, 2]},
                               resources={"cpus": 0.25, "custom": {"hs_second_node": 1}}))
    assert run_study(custom, train_fn=fakes.node_train, address=cluster.address,
                     echo=lambda _: None).complete
    runs = _finished(custom)
    assert {r.data.tags["hindsight.node_id"] for r in runs} == {cluster.node_ids["worker"]}
    assert max(r.data.metrics["node_concurrency"] for r in runs) == 1


@pytest.mark.slow  # about 40 s (a killed node or server and its recovery): .ci/run's slow phase
def test_driver_killed_then_relaunched_finds_the_finished_trials(tmp_path, cluster):
    """The study names the cluster in its ray_address field; the driver (a process of its
    own) is SIGKILLed mid-study while the cluster stays up; the relaunch skips the
    finished trials and continues the others in their runs."""
    path = _study(tmp_path, "leave", grid={"seed": [0, 1, 2, 3]}, max_concurrent=2,
                  resources={"cpus": 0.5}, ray_address=cluster.address)
    study = load_study(path)

    def launch() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(FAKES), str(path), "slow"], cwd=tmp_path,
                                env=service_env(), start_new_session=True, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    driver = launch()
    states = lambda ch: [pair_state(runs) for runs in ch.values()]
    deadline = time.time() + 600
    while time.time() < deadline:
        children = study_children(study)
        if "finished" in states(children) and "running" in states(children):
            break
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        time.sleep(1)
    else:
        pytest.fail("the study never had a finished and a running trial at once")
    os.kill(driver.pid, signal.SIGKILL)
    stop_session(driver)  # the driver's own session only: the cluster runs on
    children = study_children(study)
    client = MlflowClient(study.store_uri)
    done = {r.info.run_id: [(m.step, m.value) for m in
                            client.get_metric_history(r.info.run_id, "train/success")]
            for runs in children.values() for r in runs if r.info.status == "FINISHED"}

    rerun = launch()
    output, _ = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, output[-3000:]
    assert f"skip {len(done)} finished" in output
    after = study_children(study)
    assert len(after) == 4 and all(len(runs) == 1 for runs in after.values())  # no duplicates
    for run_id, history in done.items():  # finished runs untouched
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/success")] == history
    for runs in after.values():
        assert runs[0].info.status == "FINISHED"
        assert runs[0].data.tags["hindsight.node_id"] in cluster.node_ids.values()
        steps = {m.step for m in client.get_metric_history(runs[0].info.run_id, "train/success")}
        assert steps == set(range(6))


@pytest.mark.slow  # about 40 s (a killed node or server and its recovery): .ci/run's slow phase
def test_node_killed_mid_trial_trials_retried_in_their_runs(tmp_path, cluster):
    """Last in this module: it kills the second node.  Its trials are retried by Tune on the
    head (FailureConfig) and continue the same runs; the study completes, one run a pair."""
    # One hs_slot a node, one a trial: two trials at once, one on each node.  By CPUs alone
    # (0.5 of 2 a node) Ray may pack all four on the head, and then none runs on the node
    # this test kills (seen in CI).
    path = _study(tmp_path, "nodekill", grid={"seed": [0, 1, 2, 3]}, max_concurrent=4,
                  resources={"cpus": 0.5, "custom": {"hs_slot": 1}}, ray_address=cluster.address)
    study = load_study(path)
    driver = subprocess.Popen([sys.executable, str(FAKES), str(path), "slow"], cwd=tmp_path,
                              env=service_env(), start_new_session=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    worker = cluster.node_ids["worker"]
    on_worker = lambda ch: [r for rs in ch.values() for r in rs if r.info.status == "RUNNING"
                            and r.data.tags.get("hindsight.node_id") == worker]
    try:
        deadline = time.time() + 600
        while time.time() < deadline and not on_worker(study_children(study)):
            assert driver.poll() is None, driver.communicate()[0][-3000:]
            time.sleep(0.5)
        killed = {r.info.run_id for r in on_worker(study_children(study))}
        assert killed, "no trial ran on the second node"
        cluster.kill_worker_node()
        output, _ = driver.communicate(timeout=900)
    finally:
        stop_session(driver)
    assert driver.returncode == 0, output[-3000:]
    after = study_children(study)
    assert len(after) == 4 and all(len(runs) == 1 for runs in after.values())
    client = MlflowClient(study.store_uri)
    for runs in after.values():
        run = runs[0]
        assert run.info.status == "FINISHED"
        steps = {m.step for m in client.get_metric_history(run.info.run_id, "train/success")}
        assert steps == set(range(6))
        if run.info.run_id in killed:  # retried on the node that is left
            assert run.data.tags["hindsight.node_id"] == cluster.node_ids["head"]
