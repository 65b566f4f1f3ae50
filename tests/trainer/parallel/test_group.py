"""A rank's device (trainer/parallel/group.py): the GPU Ray Train assigned it when it runs in a
Ray Train worker, ``LOCAL_RANK``'s otherwise."""

from __future__ import annotations

import pytest
import torch

from trainer.parallel.group import select_device


@pytest.fixture
def gpus(monkeypatch):
    """A GPU machine as select_device sees it; yields the devices it made current."""
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    return current


def ray_assigns(monkeypatch, device):
    import ray.train.torch

    def get_device():
        if device is None:  # what Ray says outside a training function
            raise RuntimeError("`get_device` cannot be used outside of a Ray Train training function.")
        return torch.device(device)

    monkeypatch.setattr(ray.train.torch, "get_device", get_device)


def test_a_ray_train_worker_takes_the_gpu_ray_assigned_and_says_when_local_rank_differs(
        gpus, monkeypatch, capsys):
    monkeypatch.setenv("LOCAL_RANK", "0")
    ray_assigns(monkeypatch, "cuda:3")
    assert select_device() == "cuda:3" and gpus == [3]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "cuda:3" in lines[0] and "LOCAL_RANK=0" in lines[0]
    monkeypatch.setenv("LOCAL_RANK", "3")  # agreeing: nothing to say
    assert select_device() == "cuda:3" and not capsys.readouterr().err


def test_outside_ray_train_the_device_is_local_ranks(gpus, monkeypatch, capsys):
    monkeypatch.setenv("LOCAL_RANK", "1")
    ray_assigns(monkeypatch, None)  # Ray imported, but no training function
    assert select_device() == "cuda:1" and gpus == [1] and not capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert select_device() == "cpu"
