"""analysis.loader against a temporary sqlite MLflow store with a handful of runs."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from analysis.loader import load_histories, load_records, load_runs

STUDY = "beta-sweep"


def _log_run(client, exp_id, *, study, kind, method, seed, beta, steps=3):
    run = client.create_run(exp_id)
    rid = run.info.run_id
    tags = {"study": study, "hindsight.kind": kind, "cell_id": f"{method}-{beta}",
            "method": method, "env": "household", "backbone": "tiny", "seed": str(seed)}
    params = {"algo.method": method, "algo.beta_opd": str(beta), "algo.lambda_opd": "None",
              "seed": str(seed), "eval.greedy": "True", "writer.kind": "oracle"}
    now = int(time.time() * 1000)
    metrics = []
    for step in range(steps):
        metrics += [Metric("train/success", 0.1 * step, now + step, step),
                    Metric("time/rollout_s", 1.0 + step, now + step, step),
                    Metric("time/update_s", 2.0, now + step, step),
                    Metric("eval/test/success", 0.2 * step + 0.01 * seed, now + step, step)]
    metrics.append(Metric("perf/tokens_per_s", 123.0, now, steps - 1))
    metrics.append(Metric("opd/gate_mean", math.nan, now, 0))
    client.log_batch(rid, metrics=metrics, params=[Param(k, v) for k, v in params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
    client.set_terminated(rid)
    return rid


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlruns.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment("exp", artifact_location=(root / "artifacts").as_uri())
    ids = [_log_run(client, exp_id, study=STUDY, kind="trial", method=m, seed=s, beta=b)
           for m, b in (("grpo", 5.0), ("seed", 1.0)) for s in (0, 1)]
    _log_run(client, exp_id, study=STUDY, kind="study", method="grpo", seed=0, beta=5.0)
    _log_run(client, exp_id, study="other", kind="trial", method="grpo", seed=0, beta=5.0)
    client.delete_run(_log_run(client, exp_id, study=STUDY, kind="trial", method="grpo",
                               seed=9, beta=5.0))  # deleted runs are not part of the study
    rec_dir = root / "rec"
    rec_dir.mkdir()
    for step in (0, 5):
        frame = pd.DataFrame({"step": [step, step], "traj": [0, 1], "return": [1.0, 0.5]})
        path = rec_dir / f"step_{step:06d}.parquet"
        frame.to_parquet(path)
        client.log_artifact(ids[0], str(path), "records")
    return uri, ids


def test_load_runs_one_row_per_trial_with_params_and_final_metrics(store):
    uri, ids = store
    runs = load_runs(uri, STUDY)
    assert sorted(runs["run_id"]) == sorted(ids)  # study parent and other study excluded
    assert set(runs["status"]) == {"FINISHED"}
    assert runs["seed"].tolist() == runs["seed"].astype(int).tolist()
    assert runs["algo.beta_opd"].dtype.kind == "f"
    assert runs["eval.greedy"].dtype == bool
    assert runs["algo.lambda_opd"].isna().all()
    row = runs.set_index("run_id").loc[ids[1]]  # grpo, seed 1
    assert row["method"] == "grpo" and row["seed"] == 1
    assert row["eval/test/success"] == pytest.approx(0.2 * 2 + 0.01)  # latest step
    assert row["perf/tokens_per_s"] == 123.0
    assert row["time/rollout_s/sum"] == pytest.approx(1.0 + 2.0 + 3.0)
    assert row["time/rollout_s/mean"] == pytest.approx(2.0)
    assert row["time/update_s/sum"] == pytest.approx(6.0)
    assert "train/success" not in runs.columns  # curves come from load_histories


def test_load_runs_sqlite_path_equals_client_path(store, monkeypatch):
    uri, _ = store
    fast = load_runs(uri, STUDY)
    monkeypatch.setattr("analysis.loader._sqlite_path", lambda uri: None)
    slow = load_runs(uri, STUDY)
    pd.testing.assert_frame_equal(fast, slow[fast.columns])
    assert set(slow.columns) == set(fast.columns)
    with pytest.raises(ValueError, match="studies there: \\['beta-sweep', 'other'\\]"):
        load_runs(uri, "nope")


def test_load_runs_unknown_study_names_the_known_ones(store):
    uri, _ = store
    with pytest.raises(ValueError, match=r"no trial runs with study='nope'.*beta-sweep.*other"):
        load_runs(uri, "nope")


def test_histories_sqlite_path_equals_client_path(store, monkeypatch):
    uri, ids = store
    keys = ["train/success", "opd/gate_mean"]
    fast = load_histories(uri, ids[:2], keys)
    assert list(fast.columns) == ["run_id", "key", "step", "value"]
    assert len(fast) == 2 * (3 + 1)
    one = fast[(fast["run_id"] == ids[0]) & (fast["key"] == "train/success")]
    assert one["step"].tolist() == [0, 1, 2]
    assert one["value"].tolist() == pytest.approx([0.0, 0.1, 0.2])
    assert fast[fast["key"] == "opd/gate_mean"]["value"].isna().all()  # NaN survives
    monkeypatch.setattr("analysis.loader._sqlite_path", lambda uri: None)
    slow = load_histories(uri, ids[:2], keys)
    pd.testing.assert_frame_equal(fast, slow)


def test_load_records_concatenates_with_run_id_and_filters_steps(store):
    uri, ids = store
    rec = load_records(uri, ids)
    assert list(rec.columns) == ["run_id", "step", "traj", "return"]
    assert rec["run_id"].unique().tolist() == [ids[0]]
    assert rec["step"].tolist() == [0, 0, 5, 5]
    only = load_records(uri, ids, steps=[5])
    assert only["step"].tolist() == [5, 5]
    assert load_records(uri, ids[1:]).empty


def test_artifact_roots_sqlite_path_equals_search_runs(store, monkeypatch):
    from analysis.loader import _artifact_roots, _artifact_roots_sql, _sqlite_path

    uri, ids = store
    fast = _artifact_roots_sql(_sqlite_path(uri), ids)
    assert fast == _artifact_roots(MlflowClient(uri), ids)
    assert fast[ids[0]] == MlflowClient(uri).get_run(ids[0]).info.artifact_uri
    with pytest.raises(ValueError, match="not-a-run"):
        _artifact_roots_sql(_sqlite_path(uri), [ids[0], "not-a-run"])
    records = load_records(uri, ids)
    monkeypatch.setattr("analysis.loader._sqlite_path", lambda uri: None)
    pd.testing.assert_frame_equal(records, load_records(uri, ids))


def test_remote_path_downloads_only_wanted_files(store, tmp_path):
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from analysis.loader import _download_record_files

    uri, ids = store
    root = MlflowClient(uri).get_run(ids[0]).info.artifact_uri
    files = _download_record_files(get_artifact_repository(root), {5}, tmp_path)
    assert [f.name for f in files] == ["step_000005.parquet"]
    assert files[0].is_file() and tmp_path in files[0].parents
