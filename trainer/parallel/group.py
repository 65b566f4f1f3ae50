"""Process-group facts and the few global reductions the data-parallel ranks need.

A run is data parallel exactly when ``torch.distributed`` is initialized with more than one
rank (the launcher, Ray Train's ``TorchTrainer`` or a test's spawned gloo ranks, has called
``init_process_group`` and set ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``); otherwise every
helper here answers for one process (rank 0 of 1) without communicating, so the
single-process path is unchanged.  A group of one rank is one process: vLLM's own engine
initializes such a group in a single-process run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import torch.distributed as dist


def initialized() -> bool:
    """Whether a ``torch.distributed`` process group exists (of any size)."""
    return dist.is_available() and dist.is_initialized()


def active() -> bool:
    """Whether this process is one of several ranks of an initialized process group."""
    return initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world() -> int:
    return dist.get_world_size() if initialized() else 1


def is_main() -> bool:
    """Rank 0 (or the only process): the one that logs to MLflow and writes files."""
    return rank() == 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def rank_parts() -> tuple[int, ...]:
    """Extra parts for :func:`~trainer.models.generation.request_seed` so that ranks draw
    independent samples: ``(rank,)`` on data-parallel ranks, ``()`` for one process (whose
    seeds thereby stay what they always were)."""
    return (rank(),) if active() else ()


def check_workers(workers: int) -> None:
    """The process group must have ``parallel.workers`` ranks."""
    if world() != workers:
        raise ValueError(f"parallel.workers is {workers} but the process group has {world()} ranks; "
                         "launch as many ranks as parallel.workers says (hindsight train starts them)")


def select_device() -> str:
    """This rank's device, made the current CUDA device (so that a bare ``"cuda"`` means it
    too) on a GPU machine, ``cpu`` otherwise: inside a Ray Train worker the GPU Ray assigned
    it (``ray.train.torch.get_device()``, from the GPU ids Ray gave the worker within
    ``CUDA_VISIBLE_DEVICES``), which need not be ``LOCAL_RANK`` (then one line on stderr says
    so), else ``cuda:LOCAL_RANK``."""
    if not torch.cuda.is_available():
        return "cpu"
    index = local_rank()
    assigned = ray_train_device()
    if assigned is not None and assigned.type == "cuda":
        if assigned.index != index:
            print(f"rank {rank()}: Ray Train assigned cuda:{assigned.index}, LOCAL_RANK={index} "
                  f"differs; using cuda:{assigned.index}", file=sys.stderr)
        index = assigned.index
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def ray_train_device() -> torch.device | None:
    """The device Ray Train assigned this process, None outside a Ray Train worker (whose
    rank function imports ``ray.train`` before the trainer runs: a process without it loaded
    is no worker, and Ray is not imported for nothing)."""
    if "ray.train" not in sys.modules:
        return None
    import ray.train.torch  # deferred: Ray, already loaded in a worker

    try:
        return ray.train.torch.get_device()
    except RuntimeError:  # ray.train imported, but not inside a training function
        return None


def _comm_device() -> torch.device:
    """Where collective tensors live: the current GPU under NCCL, the CPU under gloo."""
    if active() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_sum(values: list[float]) -> list[float]:
    """``values`` summed over the ranks (float64)."""
    if not active():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_max(value: float) -> float:
    if not active():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def all_true(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank."""
    return all_max(0.0 if flag else 1.0) == 0.0


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if active():
        dist.barrier()
