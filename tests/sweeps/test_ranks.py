"""sweeps/ranks.py and the runner's booking of parallel trials: a study's resources stay per
trial, each rank takes its share, the Tune trial books a hundredth of a CPU and no GPU, and the number of
trials at once follows the cluster's GPUs (CPUs without GPUs)."""

from __future__ import annotations

import pytest
import yaml

from support.paths import DATA
from sweeps.ranks import TRIAL_CPU, rank_resources, trial_concurrency, wants_gpu
from sweeps.runner import study_workers, trial_resources
from sweeps.study import load_study
from trainer.config import ConfigError
from trainer.run.resolve import load_config


def _study(tmp_path, workers: int, resources: dict):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "ranks", "base": str(DATA / "train_micro.yaml"),
                                    "set": {"parallel.workers": workers},
                                    "grid": {"seed": [0, 1]}, "resources": resources}))
    return load_study(path)


def test_a_rank_takes_its_share_of_the_trial():
    assert rank_resources(8, True, {"cpu": 64, "gpu": 8}) == {"CPU": (64 - TRIAL_CPU) / 8, "GPU": 1.0}
    assert rank_resources(2, False, {"cpu": 2, "gpu": 0}) == {"CPU": (2 - TRIAL_CPU) / 2}
    assert rank_resources(2, False, {"cpu": 4, "gpu": 0, "accel": 2}) == {"CPU": (4 - TRIAL_CPU) / 2, "accel": 1.0}
    assert rank_resources(4, True) == {"CPU": 1.0, "GPU": 1.0}  # hindsight train: a CPU and a GPU a rank
    assert rank_resources(4, False) == {"CPU": 1.0}


def test_a_gpu_trial_must_give_every_rank_a_gpu():
    with pytest.raises(ConfigError, match=r"resources.gpus: 4 GPUs .* parallel.workers=8 .* set resources.gpus to 8"):
        rank_resources(8, True, {"cpu": 8, "gpu": 4})


def test_gpus_follow_the_device_and_the_cluster():
    assert not wants_gpu(load_config(DATA / "train_micro.yaml", ["model.device=cpu"]), 8)
    auto = load_config(DATA / "train_micro.yaml", ["model.device=auto"])
    assert wants_gpu(auto, 8) and not wants_gpu(auto, 0)
    assert wants_gpu(load_config(DATA / "train_micro.yaml", ["model.device=cuda"]), 0)


def test_trials_at_once_follow_the_cluster():
    assert trial_concurrency({"cpu": 64, "gpu": 8}, {"CPU": 128, "GPU": 16}) == 2
    assert trial_concurrency({"cpu": 64, "gpu": 8}, {"CPU": 128, "GPU": 8}) == 1
    assert trial_concurrency({"cpu": 64, "gpu": 8}, {"CPU": 16, "GPU": 4}) == 1  # at least one
    assert trial_concurrency({"cpu": 2, "gpu": 0}, {"CPU": 2}) == 1
    assert trial_concurrency({"cpu": 1, "gpu": 0}, {"CPU": 4}) == 4


def test_a_parallel_trial_books_nothing_itself(tmp_path):
    one = _study(tmp_path, 1, {"cpus": 2})
    assert study_workers(one) == 1 and trial_resources(one) == {"cpu": 2.0, "gpu": 0.0}
    two = _study(tmp_path, 2, {"cpus": 2})
    assert study_workers(two) == 2 and trial_resources(two) == {"cpu": TRIAL_CPU}
    # the trial and its ranks book the study file's resources once, no more
    assert TRIAL_CPU + 2 * rank_resources(2, False, two.resources.ray())["CPU"] == pytest.approx(2.0)


# -- end to end on Ray Train (slow: a local Ray, two gloo ranks on two cores) --------------

def _overrides(tmp_path) -> list[str]:
    return ["stages.rl.steps=2", "rollout.tasks_per_step=2", "rollout.group_size=4", "algo.minibatch_size=4",
            "eval.max_tasks=4", "eval.every=0", "output.checkpoint_every=1", "model.device=cpu",
            f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}"]


def _one_run_once_per_step(uri: str, experiment: str):
    from collections import Counter

    from trainer.run.store import make_client

    client = make_client(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                              filter_string="tags.`hindsight.kind` != 'study'")
    assert len(runs) == 1, [r.info.run_id for r in runs]
    run = runs[0]
    for key in run.data.metrics:
        steps = Counter(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert max(steps.values()) == 1, (key, steps)
    return run, client


@pytest.mark.slow
def test_hindsight_train_runs_two_ranks_on_ray_train(tmp_path, capsys):
    """`hindsight train ezpoints_small.yaml --set parallel.workers=2`: Ray Train starts two gloo
    ranks on a local Ray; one MLflow run FINISHED with each step's metrics once, a complete
    sharded checkpoint, rank 1's output in its log."""
    from support.paths import EXAMPLES
    from sweeps.cli import main
    from trainer.run.checkpoint import latest_checkpoint

    sets = [x for o in [*_overrides(tmp_path), "parallel.workers=2"] for x in ("--set", o)]
    assert main(["train", str(EXAMPLES / "ezpoints_small.yaml"), *sets]) == 0
    assert "FINISHED" in capsys.readouterr().out
    run, client = _one_run_once_per_step(f"sqlite:///{tmp_path / 'mlruns.db'}", "hindsight")
    assert run.info.status == "FINISHED" and run.data.params["parallel.workers"] == "2"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/success")] == [1, 2]
    ckpt = latest_checkpoint(tmp_path / "out")
    assert ckpt is not None and ckpt.name == "step_000002" and (ckpt / "COMPLETE").exists()
    assert (tmp_path / "out" / "rank1.log").is_file()


@pytest.mark.slow
def test_a_sweep_trial_of_two_ranks_runs_through_tune_and_train(tmp_path):
    """A study whose base sets parallel.workers: 2 and resources {cpus: 2}: one Tune trial
    (a hundredth of a CPU), its two ranks the rest, on this 2-core machine; the child run
    FINISHED once per step."""
    from support.paths import EXAMPLES
    from sweeps.runner import run_study

    path = tmp_path / "study.yaml"
    sets = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in _overrides(tmp_path))
            if not k.startswith(("output.", "tracking."))}
    path.write_text(yaml.safe_dump({"name": "ranks2", "base": str(EXAMPLES / "ezpoints_small.yaml"),
                                    "set": {**sets, "parallel.workers": 2}, "grid": {"seed": [0]},
                                    "resources": {"cpus": 2}, "out": str(tmp_path / "runs")}))
    study = load_study(path)
    status = run_study(study)
    assert status is not None and status.complete
    run, _ = _one_run_once_per_step(study.store_uri, study.experiment)
    assert run.info.status == "FINISHED" and run.data.params["parallel.workers"] == "2"


@pytest.mark.slow
def test_a_rank_that_raises_fails_the_run_with_its_traceback(tmp_path, capsys):
    """A run the ranks refuse (a frozen writer snapshot is not sharded yet): Ray Train ends
    the ranks, `hindsight train` exits 1, and the run the launcher created is FAILED with the
    rank's error in traceback.txt."""
    from support.paths import EXAMPLES
    from sweeps.cli import main
    from trainer.run.store import make_client

    sets = [x for o in [*_overrides(tmp_path), "parallel.workers=2", "writer.kind=frozen"] for x in ("--set", o)]
    assert main(["train", str(EXAMPLES / "ezpoints_small.yaml"), *sets]) == 1
    assert "2 ranks of" in capsys.readouterr().out
    client = make_client(f"sqlite:///{tmp_path / 'mlruns.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("hindsight").experiment_id])
    assert run.info.status == "FAILED"
    client.download_artifacts(run.info.run_id, "traceback.txt", str(tmp_path))
    text = (tmp_path / "traceback.txt").read_text()
    assert "writer snapshot" in text
