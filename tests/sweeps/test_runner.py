"""sweeps.runner on a real local Ray (one session for the module) with fake trainables:
failures, skip/retry, new cells only, MLflow parent/child layout, Optuna search, status."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from support import sweeps_fakes as fakes
from sweeps.cli.studies import status_command
from sweeps.ray_session import init_ray
from sweeps.runner import run_study
from sweeps.status import study_children
from sweeps.study import load_study

pytestmark = pytest.mark.slow  # Ray start and Tune runs take tens of seconds on 2 CPUs


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    import ray

    init_ray()
    yield
    ray.shutdown()


def _study(tmp_path: Path, grid: dict | None = None, **extra):
    data = {"name": "t", "base": {"model": {"backbone": "tiny"}}, "resources": {"cpus": 0.5},
            "max_concurrent": 4, "out": "out", **({"grid": grid} if grid else {}), **extra}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study(path)


def _runs(study) -> dict:
    """(cell_id, seed) -> run ids."""
    return {k: [r.info.run_id for r in runs] for k, runs in study_children(study).items()}


def test_failure_skip_and_retry_reuse_runs(tmp_path):
    study = _study(tmp_path, {"writer.model": ["", "fail_once"], "seed": [0, 1]})
    lines: list[str] = []
    status = run_study(study, train_fn=fakes.fake_train, echo=lines.append)
    assert status.counts() == {"finished": 2, "running": 0, "failed": 2, "missing": 0}
    assert sum("FAILED" in line for line in lines) == 2 and sum("finished " in line for line in lines) == 2
    children = study_children(study)
    client = MlflowClient(study.store_uri)
    parent_ids = {r.data.tags["mlflow.parentRunId"] for runs in children.values() for r in runs}
    assert len(parent_ids) == 1
    parent = client.get_run(parent_ids.pop())
    assert parent.data.tags["hindsight.kind"] == "study" and parent.info.status == "FAILED"
    failed = [r for runs in children.values() for r in runs if r.info.status == "FAILED"]
    for run in failed:
        where = client.download_artifacts(run.info.run_id, "traceback.txt", str(tmp_path))
        assert "boom once" in Path(where).read_text()
    finished = [r for runs in children.values() for r in runs if r.info.status == "FINISHED"]
    for run in finished:
        hist = client.get_metric_history(run.info.run_id, "train/success")
        assert [m.step for m in hist] == [0, 1, 2]
        assert run.data.tags["method"] == "grpo" and run.data.params["algo.method"] == "grpo"

    lines.clear()  # relaunch: nothing to do, failed ones are skipped
    run_study(study, train_fn=fakes.fake_train, echo=lines.append)
    assert lines[0].startswith("launch 0, skip 2 finished, skip 2 failed")

    status = run_study(study, train_fn=fakes.fake_train, retry_failed=True, echo=lines.append)
    assert status.complete
    assert _runs(study) == {k: [r.info.run_id for r in runs] for k, runs in children.items()}
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_adding_a_value_runs_only_the_new_cell_and_status(tmp_path, capsys):
    study = _study(tmp_path, {"algo.beta_opd": [1.0], "seed": [0]})
    run_study(study, train_fn=fakes.fake_train, echo=lambda _: None)
    first = _runs(study)
    bigger = _study(tmp_path, {"algo.beta_opd": [1.0, 2.0], "seed": [0]})
    lines: list[str] = []
    run_study(bigger, train_fn=fakes.fake_train, dry_run=True, echo=lines.append)
    plan = lines[0].splitlines()
    assert plan[0].startswith("launch 1, skip 1 finished") and "algo.beta_opd=2.0" in plan[1]
    assert _runs(bigger) == first  # dry run launched nothing
    run_study(bigger, train_fn=fakes.fake_train, echo=lines.append)
    after = _runs(bigger)
    assert len(after) == 2 and all(after[k] == ids for k, ids in first.items())
    args = argparse.Namespace(study=str(bigger.path), out=None)
    assert status_command(args) == 0
    assert "2 finished, 0 running, 0 failed, 0 missing" in capsys.readouterr().out
    more = _study(tmp_path, {"algo.beta_opd": [1.0, 2.0], "seed": [0, 1]})
    assert status_command(argparse.Namespace(study=str(more.path), out=None)) == 1


def test_optuna_search_mean_over_seeds_and_resume(tmp_path):
    search = {"space": {"algo.beta_opd": {"type": "float", "low": 1.0, "high": 5.0}},
              "trials": 3, "seeds_per_trial": 2, "sampler_seed": 7,
              "metric": "eval/eval_unseen/success", "mode": "max"}
    study = _study(tmp_path, search=search)
    lines: list[str] = []
    status = run_study(study, train_fn=fakes.fake_train, echo=lines.append)
    assert status.complete and len(status.states) == 6  # 3 cells x 2 seeds
    trial_lines = [line for line in lines if line.startswith("[")]
    assert len(trial_lines) == 3, lines  # suggested values rounded to 4 significant digits
    assert all(re.search(r" algo\.beta_opd=\d\.\d{1,3} \(", line) for line in trial_lines), lines
    assert re.match(r"best: algo\.beta_opd=\d\.\d{1,3} -> ", lines[-1]), lines
    ot = optuna.load_study(study_name="t", storage=study.search.storage)
    complete = ot.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 3
    for trial in complete:  # fake success = 0.1 beta + 0.01 seed; mean over seeds 0, 1
        assert trial.value == pytest.approx(0.1 * trial.params["algo.beta_opd"] + 0.005, abs=1e-6)
    lines: list[str] = []
    run_study(study, train_fn=fakes.fake_train, echo=lines.append)
    assert lines[0].startswith("search t: 0 of 3 Optuna trials to run")


def test_console_one_line_per_trial_start_and_end_worker_output_in_trial_logs(tmp_path, capfd):
    """The driver prints the plan, then one `started` and one end line per trial (start
    first), and a progress bar; what the trials print (weight-loading bars, logging) is in
    each trial's trial.log (the run's hindsight.log tag), not on the sweep's console."""
    study = _study(tmp_path, {"seed": [0, 1, 2]}, max_concurrent=2)
    lines: list[str] = []
    status = run_study(study, train_fn=fakes.chatty_train, echo=lines.append, bar=True)
    assert status.complete
    out, err = capfd.readouterr()
    assert lines[0].startswith("launch 3, skip 0 finished")
    body = lines[1:]
    assert len(body) == 6, lines
    for seed in (0, 1, 2):
        mine = [i for i, line in enumerate(body) if f"seed={seed}" in line]
        assert len(mine) == 2 and body[mine[0]].startswith("  started  ")
        assert re.match(r"\[\d/3\] finished ", body[mine[1]])
    assert fakes.CHATTER not in out + err + "\n".join(lines)
    assert "3/3" in err  # the study's progress bar
    for runs in study_children(study).values():
        log = Path(runs[0].data.tags["hindsight.log"])
        assert log.parent.name.endswith(f"-s{runs[0].data.tags['seed']}")
        text = log.read_text()
        assert f"{fakes.CHATTER} (print, seed" in text and f"{fakes.CHATTER} (logging)" in text
        assert f"{fakes.CHATTER}: 100%" in text  # the tqdm bar
        assert runs[0].data.tags["hindsight.node_id"]


def test_durations_are_each_trials_own_not_the_time_since_launch(tmp_path):
    """Two slots, three trials of about 3 s: the third waits for a slot, yet its MLflow
    run starts and ends with its trial (the UI's Duration is the trial's wall time) and the
    console's "(N s)" is the trial's own, not the time since the sweep's launch."""
    study = _study(tmp_path, {"seed": [0, 1, 2]}, max_concurrent=2)
    lines: list[str] = []
    launched = time.time()
    status = run_study(study, train_fn=fakes.timed_train, echo=lines.append)
    assert status.complete
    runs = sorted((r for rs in study_children(study).values() for r in rs),
                  key=lambda r: r.info.start_time)
    assert len(runs) == 3
    first_end = min(r.info.end_time for r in runs[:2]) / 1000
    third = runs[2]
    own = json.loads((Path(third.data.tags["hindsight.log"]).parent / "timed.json").read_text())
    start, end = third.info.start_time / 1000, third.info.end_time / 1000
    assert start >= first_end - 0.5  # created when its trial started, after a slot freed
    assert own["end"] - own["start"] >= 3.0
    # MLflow's duration is the trial's (plus creating and closing the run), far from the
    # time since launch (at least two trials' worth)
    assert 0.0 <= (end - start) - (own["end"] - own["start"]) < 2.0
    assert end - launched > (end - start) + 2.5
    seed = third.data.tags["seed"]
    line = next(x for x in lines if x.startswith("[") and f"seed={seed}" in x)
    seconds = int(re.search(r"\((\d+) s\)", line).group(1))
    assert abs(seconds - (end - start)) <= 2.0, (line, end - start)
