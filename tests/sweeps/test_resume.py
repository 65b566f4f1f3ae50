"""SIGKILL the sweep driver mid-study, run the same command again: the study completes
with one child run per (cell, seed) and no finished run lost."""

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

from support.paths import FAKES
from sweeps.status import pair_state, study_children
from sweeps.study import load_study


def _launch(study_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(FAKES), str(study_path), "slow"],
                            cwd=study_path.parent, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(study, predicate, timeout: float) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        children = study_children(study)
        if predicate(children):
            return children
        time.sleep(2)
    raise AssertionError(f"study did not reach the expected state in {timeout} s")


def _session_pids(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-s", str(sid), "-o", "pid="], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.slow
def test_sigkill_driver_then_rerun_completes_without_duplicates(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "crash", "base": {"model": {"backbone": "tiny"}}, "out": "out",
        "grid": {"seed": [0, 1, 2, 3]}, "resources": {"cpus": 0.5}, "max_concurrent": 2}))
    study = load_study(path)

    driver = _launch(path)
    states = lambda ch: [pair_state(runs) for runs in ch.values()]
    before = _wait_for(study, lambda ch: "finished" in states(ch) and "running" in states(ch), 600)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(30)
    time.sleep(5)  # the local Ray shares the driver's fate: give it a moment to go
    leftovers = _session_pids(driver.pid)
    for pid in leftovers:  # only processes of the session this test started
        os.kill(pid, signal.SIGKILL)
    client = MlflowClient(study.store_uri)
    done = {r.info.run_id: [(m.step, m.value) for m in
                            client.get_metric_history(r.info.run_id, "train/success")]
            for runs in before.values() for r in runs if r.info.status == "FINISHED"}
    assert done

    rerun = _launch(path)
    output, _ = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, output[-3000:]
    after = study_children(study)
    assert len(after) == 4 and all(len(runs) == 1 for runs in after.values())  # no duplicates
    assert all(runs[0].info.status == "FINISHED" for runs in after.values())
    for run_id, history in done.items():  # finished runs untouched
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/success")] == history
    for runs in after.values():  # resumed runs continued the same run: every step is there
        steps = {m.step for m in client.get_metric_history(runs[0].info.run_id, "train/success")}
        assert steps == set(range(6))
    parents = client.search_runs([runs[0].info.experiment_id],
                                 filter_string="tags.`hindsight.kind` = 'study'")
    assert len(parents) == 1
    print(f"processes left in the killed driver's session: {len(leftovers)}")
