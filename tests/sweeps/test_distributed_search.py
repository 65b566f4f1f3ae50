"""Several drivers feeding one Optuna search: the ``trials`` budget is shared (no more
trials than asked for, none lost) and each (cell, seed) is trained once.  The budget is
checked on a sqlite storage without Ray; two real drivers run at once on PostgreSQL (Optuna
storage and MLflow store), each with its own local Ray."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from ray.tune.search import Searcher

from support.paths import FAKES
from support.services import Unavailable, postgres, service_env, stop_session
from sweeps import search
from sweeps.status import study_children
from sweeps.study import load_study

SPACE = {"algo.beta_opd": {"type": "categorical", "choices": [1.0, 2.0, 3.0]}}


def _study(tmp_path: Path, **data) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "shared", "base": {"model": {"backbone": "tiny"}},
                                    "out": "out", **data}))
    return path


def test_two_searchers_share_the_trials_budget(tmp_path):
    study = load_study(_study(tmp_path, search={"space": SPACE, "trials": 3}))
    a, b = search.make_searcher(study), search.make_searcher(study)
    answers = [s.suggest(f"{name}{i}") for i in range(4) for name, s in (("a", a), ("b", b))]
    assert sum(isinstance(x, dict) for x in answers) == 3
    assert answers[-2:] == [Searcher.FINISHED] * 2
    ot = optuna.load_study(study_name="shared", storage=study.search.storage)
    running = ot.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert len(running) == 3
    assert all(t.system_attrs[search.DRIVER_ATTR] == search.driver_id() for t in running)
    # A relaunch from this process (no search running in it) fails those as abandoned.
    assert search.remaining_trials(study) == 3


@pytest.mark.slow  # about 40 s (PostgreSQL and two drivers): .ci/run's slow phase
@pytest.mark.services
def test_two_drivers_feed_one_study_on_postgresql(tmp_path):
    try:
        with postgres() as pg:
            optuna_url, mlflow_url = pg.create_db("optuna"), pg.create_db("mlflow")
            _two_drivers(tmp_path, optuna_url, mlflow_url)
    except Unavailable as exc:
        pytest.skip(f"no PostgreSQL on this machine: {exc}")


def _two_drivers(tmp_path: Path, optuna_url: str, mlflow_url: str) -> None:
    # 3 cells x 2 seeds; 6 Optuna trials over 3 cells propose the same cells again.
    path = _study(tmp_path, tracking_uri=mlflow_url, resources={"cpus": 0.5}, max_concurrent=2,
                  search={"space": SPACE, "trials": 6, "seeds_per_trial": 2,
                          "storage": optuna_url})
    study = load_study(path)
    drivers = [subprocess.Popen([sys.executable, str(FAKES), str(path), "counted"], cwd=tmp_path,
                                env=service_env(), start_new_session=True, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for _ in range(2)]
    try:
        outputs = [d.communicate(timeout=1200)[0] for d in drivers]
    finally:
        for driver in drivers:
            stop_session(driver)
    for driver, output in zip(drivers, outputs):
        assert driver.returncode == 0, output[-3000:]

    ot = optuna.load_study(study_name="shared", storage=optuna_url)
    states = Counter(t.state.name for t in ot.get_trials())
    assert states["COMPLETE"] == 6 and states["RUNNING"] == 0, states  # none lost, none extra
    surplus = [t for t in ot.get_trials() if t.system_attrs.get(search.SURPLUS_ATTR)]
    assert states["FAIL"] == len(surplus)  # the only failed trials are surplus, never trained
    assert len({t.system_attrs[search.DRIVER_ATTR] for t in ot.get_trials()}) == 2  # both fed it

    trainings = Counter((tmp_path / "out" / "trainings.txt").read_text().splitlines())
    assert trainings and max(trainings.values()) == 1, trainings  # no (cell, seed) twice
    children = study_children(study)
    assert set(children) == {tuple(k.split()[0:1]) + (int(k.split()[1]),) for k in trainings}
    assert all(len(runs) == 1 and runs[0].info.status == "FINISHED" for runs in children.values())
    client = MlflowClient(mlflow_url)
    exp = client.get_experiment_by_name(study.experiment)
    parents = client.search_runs([exp.experiment_id], "tags.`hindsight.kind` = 'study'")
    assert len(parents) == 1  # one study run for both drivers, every trial once under it
    assert {r.data.tags["mlflow.parentRunId"] for rs in children.values() for r in rs} == {
        parents[0].info.run_id}
    for trial in ot.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        beta = trial.params["algo.beta_opd"]  # each complete trial's mean over its two seeds
        assert trial.value == pytest.approx(0.1 * beta + 0.005, abs=1e-6)
