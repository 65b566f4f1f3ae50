"""How a study reads in MLflow, without Ray: the experiment is named after the study and
described, run names start with method and seed, the parent run points to its report, trials
carry their checkpoint folder, and nothing is written outside the study folder."""

from __future__ import annotations

from pathlib import Path

import sweeps_fakes as fakes
import yaml

from sweeps.runner import Launch, child_config, ensure_parent, prepare_child, run_trial
from sweeps.study import expand, load_study
from trainer.tracking import NOTE_TAG, experiment_id, make_client


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
