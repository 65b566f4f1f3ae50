"""How a study reads in MLflow, without Ray: the experiment is named after the study and
described, run names start with method and seed, the parent run points to its report, trials
carry their checkpoint folder, and nothing is written outside the study folder; how a
failed trial is recorded (the trainable called directly, Tune's report faked)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import yaml

from support import sweeps_fakes as fakes
from sweeps.runner import Console, _progress_callback, grid_trainable, run_trial
from sweeps.study import load_study
from sweeps.trial_runs import Launch, child_config, ensure_parent, mark_failed, prepare_child
from sweeps.trials import expand
from trainer.config import from_dict, to_dict
from trainer.run.store import experiment_id, make_client
from trainer.run.tracking import NOTE_TAG


def test_a_study_reads_well_in_mlflow(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "beta-study", "out": "out",
                                    "base": {"model": {"backbone": "tiny"}},
                                    "grid": {"algo.method": ["etro"], "seed": [0]}}))
    study = load_study(path)
    trial = expand(study)[0]
    assert trial.cfg.tracking.run_name == f"etro-s0-{trial.cell_id[:8]}"

    client = make_client(study.store_uri)
    exp_id = experiment_id(client, study.experiment)
    parent_id = ensure_parent(client, exp_id, study)
    run_id = prepare_child(client, exp_id, parent_id, Launch(trial))
    run_trial(child_config(trial, parent_id), run_id, False, fakes.fake_train)

    exp = client.get_experiment(exp_id)
    assert exp.name == "beta-study"
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # UI: runs view
    assert "beta-study" in exp.tags[NOTE_TAG] and str(study.out_dir) in exp.tags[NOTE_TAG]
    parent = client.get_run(parent_id)
    assert parent.info.run_name == "beta-study"
    assert "report > index.html" in parent.data.tags[NOTE_TAG]
    assert f"hindsight report {path}" in parent.data.tags[NOTE_TAG]
    child = client.get_run(run_id)
    assert child.info.run_name == f"etro-s0-{trial.cell_id[:8]}"
    assert child.data.tags["mlflow.parentRunId"] == parent_id
    assert child.data.tags["hindsight.checkpoints"] == str(
        study.out_dir / "trials" / trial.name / "checkpoints")

    # nothing outside the study folder: every experiment (MLflow's Default too) stores its
    # artifacts under <out>/artifacts, and the current folder holds only the study file
    for experiment in client.search_experiments():
        location = Path(experiment.artifact_location.removeprefix("file://"))
        assert location.is_relative_to(study.out_dir / "artifacts"), experiment
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "study.yaml"]


def _prepared(tmp_path, writer_model: str = ""):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "faults", "out": "out",
                                    "base": {"model": {"backbone": "tiny"},
                                             "writer": {"model": writer_model}},
                                    "grid": {"seed": [0]}}))
    study = load_study(path)
    trial = expand(study)[0]
    client = make_client(study.store_uri)
    exp_id = experiment_id(client, study.experiment)
    parent_id = ensure_parent(client, exp_id, study)
    run_id = prepare_child(client, exp_id, parent_id, Launch(trial))
    spec = {"name": trial.name, "desc": trial.describe(), "run_id": run_id, "resume": False,
            "cfg": to_dict(child_config(trial, parent_id))}
    return client, run_id, spec


def test_a_training_exception_is_reported_failed_not_raised(tmp_path, monkeypatch):
    """The trainable reports a failed training (its run FAILED with traceback.txt) instead
    of raising, so that Tune's retries are kept for dead workers and nodes; the console's
    end line says FAILED with the reason and the trial's log."""
    from ray import tune

    reports: list[dict] = []
    monkeypatch.setattr(tune, "report", reports.append)
    client, run_id, spec = _prepared(tmp_path, "fail")
    grid_trainable(fakes.fake_train)({"trial": spec})
    assert reports == [{"done": 1.0, "failed": 1.0, "error": "RuntimeError: boom: injected failure"}]
    assert client.get_run(run_id).info.status == "FAILED"
    lines: list[str] = []
    ended: list[dict] = []
    progress = _progress_callback(Console(lines.append, 1), lambda t: "the trial",
                                  lambda t: "its/trial.log", lambda t, reason: None, ended.append)
    progress.on_trial_complete(0, [], SimpleNamespace(last_result=reports[0]))
    assert re.fullmatch(r"\[1/1\] FAILED   the trial \(\d+ s\): RuntimeError: boom: injected "
                        r"failure \(log: its/trial\.log\)", lines[0]), lines
    assert ended == []  # a failed trial never reaches the search's end-of-trial hook


def test_a_started_run_resumes_and_a_dead_trial_ends_failed_with_the_reason(tmp_path):
    """A trial retried after its worker died finds its run RUNNING: it resumes from its
    checkpoint; a trial Tune gives up on leaves a RUNNING run, which ends FAILED with the
    reason (tag hindsight.failure)."""
    client, run_id, spec = _prepared(tmp_path)
    calls: list[bool] = []

    def record(cfg, *, run_id=None, resume=False, progress=True):
        calls.append(resume)
        return fakes.fake_train(cfg, run_id=run_id, resume=resume, progress=progress)

    client.update_run(run_id, status="RUNNING")  # as a worker that died mid-trial left it
    run_trial(from_dict(spec["cfg"]), run_id, False, record)
    assert calls == [True]
    client.update_run(run_id, status="RUNNING")
    mark_failed(client, run_id, "RayActorError: the actor died unexpectedly")
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["hindsight.failure"] == "RayActorError: the actor died unexpectedly"
    mark_failed(client, run_id, "again")  # a terminal run is left as it is
    assert client.get_run(run_id).data.tags["hindsight.failure"].startswith("RayActorError")
