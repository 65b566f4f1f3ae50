"""Searches that prune (``search.pruner``): the config's one-line errors, the scheduler it
names, what a trial reports, a pruned trial recorded in a real MLflow sqlite store (tag
``pruned_at``, KILLED) and in a real Optuna study (PRUNED, never the best), and, on local
Ray, a tiny pruned search end to end."""

from __future__ import annotations

import copy
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from analysis.loader import load_runs
from analysis.pruning import pruned_trials
from support import sweeps_fakes as fakes
from sweeps import search
from sweeps.pruning import COMPLETE, OBJECTIVE, RUNS, STEP, TRAINED, TrialReports, make_scheduler
from sweeps.status import pair_state
from sweeps.study import load_study, parse_study
from sweeps.trial_runs import settle_search_trial
from trainer.config import ConfigError

SPACE = {"algo.beta_opd": {"type": "float", "low": 1.0, "high": 5.0}}
BASE = {"model": {"backbone": "tiny"}, "algo": {"method": "seed"}, "stages": {"rl": {"steps": 6}}, "eval": {"every": 2}}


def _data(**search) -> dict:
    return {"name": "p", "base": copy.deepcopy(BASE), "out": "out",
            "search": {"space": SPACE, "trials": 4, **search}}


def _study(tmp_path: Path, **search):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_data(**search)))
    return load_study(path)


@pytest.mark.parametrize("pruner, base, message", [
    ({"type": "ashaa"}, {}, "search.pruner.type: got 'ashaa'; valid: asha, median"),
    ({"type": "asha", "grace_step": 2}, {}, "unknown key 'grace_step'; did you mean 'grace_steps'?"),
    ({"grace_steps": 2}, {}, "search.pruner.type: got None; valid: asha, median"),
    ("asha", {}, "search.pruner: expected a mapping with type (asha, median)"),
    ({"type": "median", "reduction_factor": 3}, {}, "reduction_factor: applies to type asha, not median"),
    ({"type": "asha", "min_trials": 3}, {}, "min_trials: applies to type median, not asha"),
    ({"type": "asha", "reduction_factor": 1}, {}, "reduction_factor: got 1; valid: an integer >= 2"),
    ({"type": "median", "grace_steps": 0}, {}, "grace_steps: got 0; valid: an integer >= 1"),
    ({"type": "asha", "brackets": 1.5}, {}, "brackets: got 1.5; valid: an integer >= 1"),
    ({"type": "asha"}, {"eval": {"every": 0}}, "needs evaluations during a run, got eval.every 0 "
                                               "with stages.rl.steps 6; valid: eval.every 1 to 5"),
    ({"type": "asha"}, {"eval": {"every": 6}}, "got eval.every 6"),
    ({"type": "median"}, {"parallel": {"workers": 2}, "rollout": {"tasks_per_step": 2}},
     "needs runs of one process, got parallel.workers 2; valid: 1"),
    ({"type": "asha"}, {"space": {"stages.rl.steps": {"type": "int", "low": 4, "high": 8}}},
     "needs the same steps in every trial, got search.space over stages.rl.steps; valid: a space "
     "without stages.rl.steps or eval.every"),
])
def test_pruner_config_errors_are_one_line_with_the_valid_values(tmp_path, pruner, base, message):
    data, base = _data(pruner=pruner), dict(base)
    data["search"]["space"] = {**SPACE, **base.pop("space", {})}
    data["base"].update(base)
    with pytest.raises(ConfigError) as err:
        parse_study(data, folder=tmp_path, out=tmp_path / "out")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("study.search.pruner")


def test_pruner_defaults_and_the_scheduler_each_type_makes(tmp_path):
    from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, MedianStoppingRule

    assert _study(tmp_path).search.pruner is None
    asha = _study(tmp_path, pruner={"type": "asha", "grace_steps": 2}, seeds_per_trial=2).search
    assert (asha.pruner.type, asha.pruner.grace_steps, asha.pruner.reduction_factor) == ("asha", 2, 2)
    scheduler = make_scheduler(asha.pruner, asha.mode, 12)
    assert isinstance(scheduler, AsyncHyperBandScheduler)
    assert (scheduler._time_attr, scheduler._metric, scheduler._max_t) == (STEP, OBJECTIVE, 12)
    assert [rung for rung, _ in scheduler._brackets[0]._rungs] == [8, 4, 2]
    median = _study(tmp_path, pruner={"type": "median", "min_trials": 2}, mode="min").search
    scheduler = make_scheduler(median.pruner, median.mode, 6)
    assert isinstance(scheduler, MedianStoppingRule) and scheduler._min_samples_required == 2
    assert (scheduler._time_attr, scheduler._mode) == (STEP, "min")
    assert isinstance(make_scheduler(None, "max", 6), FIFOScheduler)


def test_a_trial_reports_the_objective_so_far_at_its_steps_over_its_seeds():
    sent = []
    reports = TrialReports(sent.append, "eval/x", steps=6, seeds=2)
    reports.run_ids.append("r0")
    assert reports.on_eval(0, {"eval/x": 0.9}) is False and not sent  # before any training
    assert reports.on_eval(2, {"eval/x": 0.2}) is False
    assert reports.on_eval(6, {"eval/x": 0.9}) is False  # a run's last: reported by seed_done
    assert reports.seed_done(0.5) is False
    reports.run_ids.append("r1")
    reports.on_eval(4, {"eval/x": 0.3})
    reports.seed_done(0.7)
    assert [(r[STEP], r[OBJECTIVE], r[COMPLETE]) for r in sent] == [
        (2, 0.2, 0.0), (6, 0.5, 0.0), (10, pytest.approx(0.4), 0.0), (12, pytest.approx(0.6), 1.0)]
    assert sent[-1]["done"] == 1.0 and "done" not in sent[0] and sent[-1][RUNS] == "r0,r1"


def test_a_report_the_scheduler_stops_ends_the_run_without_raising():
    def stop(result):  # Ray's session ends the reporting thread so (sys.exit(0))
        raise SystemExit(0)

    reports = TrialReports(stop, "eval/x", steps=6, seeds=1)
    assert reports.on_eval(2, {"eval/x": 0.1}) is True and reports.stopped
    with pytest.raises(SystemExit):  # then the trial's thread ends as Tune's session ends it
        reports.end()


def _runs(client: MlflowClient, statuses: list[str]) -> list[str]:
    exp = client.create_experiment("p")
    ids = []
    for status in statuses:
        run = client.create_run(exp, tags={"study": "p", "hindsight.kind": "trial", "cell_id": "c1",
                                           "seed": str(len(ids)), "method": "seed", "env": "household",
                                           "backbone": "tiny"})
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status=status)
        ids.append(run.info.run_id)
    return ids


def test_a_pruned_trial_is_tagged_and_killed_in_mlflow_and_counted_by_the_report(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(uri)
    reused, finished, running = _runs(client, ["FINISHED", "FINISHED", "RUNNING"])
    pruned = {OBJECTIVE: 0.1, STEP: 8, COMPLETE: 0.0, "done": True,
              RUNS: f"{reused},{finished},{running}", TRAINED: f"{finished},{running}"}
    settle_search_trial(client, pruned)
    runs = {r: client.get_run(r) for r in (reused, finished, running)}
    assert runs[running].info.status == "KILLED" and runs[finished].info.status == "FINISHED"
    assert runs[running].data.tags["pruned_at"] == runs[finished].data.tags["pruned_at"] == "8"
    assert "pruned_at" not in runs[reused].data.tags  # not trained by the pruned trial
    assert pair_state([runs[running]]) == "pruned"  # done, not failed: the study can complete
    frame = load_runs(uri, "p")
    assert pruned_trials(frame).to_dict("records") == [{"pruned_at": 8, "trials": 1}]
    # a later trial of the same cell trains them to the end: the tags go
    settle_search_trial(client, {OBJECTIVE: 0.4, STEP: 12, COMPLETE: 1.0,
                                 RUNS: f"{finished},{running}", TRAINED: running})
    assert all("pruned_at" not in client.get_run(r).data.tags for r in (finished, running))
    assert pruned_trials(load_runs(uri, "p")).empty


def test_a_pruned_trial_is_optuna_pruned_never_the_best_and_spends_its_budget(tmp_path):
    study = _study(tmp_path, pruner={"type": "asha"}, trials=3)
    searcher = search.make_searcher(study)
    first, second = searcher.suggest("t0"), searcher.suggest("t1")
    assert isinstance(first, dict) and isinstance(second, dict)
    searcher.on_trial_result("t0", {OBJECTIVE: 0.9, STEP: 2, COMPLETE: 0.0})
    # stopped at step 4: Tune gives the searcher the stopping result only at completion
    searcher.on_trial_complete("t0", result={OBJECTIVE: 0.8, STEP: 4, COMPLETE: 0.0, "done": True})
    searcher.on_trial_result("t1", {OBJECTIVE: 0.1, STEP: 2, COMPLETE: 0.0})
    searcher.on_trial_complete("t1", result={OBJECTIVE: 0.2, STEP: 6, COMPLETE: 1.0, "done": True})
    ot = optuna.load_study(study_name="p", storage=study.search.storage)
    states = {t.number: t for t in ot.get_trials()}
    assert states[0].state == optuna.trial.TrialState.PRUNED
    assert states[0].intermediate_values == {2: 0.9, 4: 0.8}
    assert states[1].state == optuna.trial.TrialState.COMPLETE and states[1].value == 0.2
    assert states[1].intermediate_values == {2: 0.1}
    best = search.best_trial(study)
    assert best.number == 1  # the pruned trial's 0.8 is higher but not a complete result
    assert search.remaining_trials(study) == 1  # 3 trials, 1 complete, 1 pruned


@pytest.mark.slow  # starts a local Ray and runs 6 Tune trials
def test_a_tiny_pruned_search_runs_end_to_end_on_local_ray(tmp_path):
    import ray

    from reports.index import build_report
    from reports.inputs import ReportInputs
    from sweeps.ray_session import init_ray
    from sweeps.runner import run_study

    study = _study(tmp_path, trials=6, seeds_per_trial=1, sampler_seed=3,
                   pruner={"type": "asha", "grace_steps": 2, "reduction_factor": 2})
    study = type(study)(**{**study.__dict__, "max_concurrent": 2})
    init_ray()
    try:
        lines: list[str] = []
        status = run_study(study, train_fn=fakes.pruned_train, echo=lines.append)
    finally:
        ray.shutdown()
    ended = [line for line in lines if line.startswith("[")]
    pruned_lines = [line for line in ended if " pruned " in line]
    assert len(ended) == 6 and pruned_lines, lines
    ot = optuna.load_study(study_name="p", storage=study.search.storage)
    states = [t.state for t in ot.get_trials()]
    n_pruned = states.count(optuna.trial.TrialState.PRUNED)
    assert n_pruned == len(pruned_lines) >= 1
    assert states.count(optuna.trial.TrialState.COMPLETE) == 6 - n_pruned
    assert status.complete and status.counts()["pruned"] == n_pruned  # the parent run FINISHED
    runs = load_runs(study.store_uri, "p")
    killed = runs[runs["status"] == "KILLED"]
    assert len(killed) == n_pruned and killed["pruned_at"].notna().all()
    assert set(killed["pruned_at"].astype(int)) <= {2, 4}
    assert (runs.loc[runs["status"] == "FINISHED", "pruned_at"].isna()).all()
    best = search.best_trial(study)
    assert best.state == optuna.trial.TrialState.COMPLETE
    # the report counts them and the sensitivity analysis leaves them out
    inputs = ReportInputs.from_frames(runs, search=True, expected=None, n_boot=20)
    assert sum(len(s.cells) for s in inputs.sensitivity) == 6 - n_pruned
    text = build_report(inputs, tmp_path / "report", "p", "abc1234").read_text()
    counts = pruned_trials(runs)
    for step, n in zip(counts["pruned_at"], counts["trials"]):
        assert f"{n} at step {step}" in text
