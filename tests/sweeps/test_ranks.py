"""sweeps/ranks.py and the runner's booking of parallel trials: a study's resources stay per
trial, each rank takes its share, the Tune trial books nothing itself, and the number of
trials at once follows the cluster's GPUs (CPUs without GPUs)."""

from __future__ import annotations

import pytest
import yaml

from support.paths import DATA
from sweeps.ranks import rank_resources, trial_concurrency, wants_gpu
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
    assert rank_resources(8, True, {"cpu": 64, "gpu": 8}) == {"CPU": 8.0, "GPU": 1.0}
    assert rank_resources(2, False, {"cpu": 2, "gpu": 0}) == {"CPU": 1.0}
    assert rank_resources(2, False, {"cpu": 4, "gpu": 0, "accel": 2}) == {"CPU": 2.0, "accel": 1.0}
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
    assert study_workers(two) == 2 and trial_resources(two) == {"cpu": 0.0}
