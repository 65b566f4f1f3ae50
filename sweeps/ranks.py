"""One run on several ranks: Ray Train starts ``parallel.workers`` workers, each calls the
trainer's one entry point.

Ray Train's ``TorchTrainer`` (Train V2, Ray's default) starts the ranks as Ray actors, sets
up the process group (gloo on CPUs, NCCL on GPUs) and the ``RANK`` / ``WORLD_SIZE`` /
``LOCAL_RANK`` variables, and each rank calls :func:`trainer.run.loop.train`, which shards
the model with FSDP2 when it finds the process group (:mod:`trainer.parallel`). Rank 0 logs
to MLflow and writes the records; the others write their output to ``rank<r>.log`` in the
run's output folder.

* **Resources.** On its own (``hindsight train``) a rank takes one CPU, and one GPU when the
  run is on GPUs (``model.device: cuda``, or ``auto`` on a cluster with GPUs). Inside a
  study's trial the study file's ``resources`` stay per trial: each rank takes its share
  (``resources.gpus: 8`` with ``parallel.workers: 8`` is one GPU a rank), and the Tune trial
  itself books no GPU and a hundredth of a CPU (:data:`TRIAL_CPU`, taken from the ranks'
  share; Train V2's controller takes none), so nothing is booked twice.
* **Failures.** A rank that raises ends the whole run (``FailureConfig(max_failures=0)``):
  the launcher raises :class:`RanksFailed` with the rank's traceback, and the run is marked
  FAILED with it (``traceback.txt``), by the trial (a sweep) or here (``hindsight train``).
  The rerun resumes from the last complete sharded checkpoint into the same run.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.config import ConfigError, RunConfig, from_dict, to_dict

if TYPE_CHECKING:
    from trainer.run.loop import RunResult

# rank 0's RunResult, read back by the launcher (Train V2's Result.metrics stays None for a
# report without a checkpoint, measured with Ray 2.60, so the result travels as a file)
RESULT_FILE = "ranks_result.json"
# What the Tune trial of a parallel run books itself: Tune refuses a trial of no resources,
# and the trial only waits on Train's controller (which takes none); the ranks share the rest
# of the trial's CPUs, so a trial still books exactly its study file's resources.
TRIAL_CPU = 0.01


class RanksFailed(RuntimeError):
    """A rank of a parallel run raised; the message carries its traceback."""



def wants_gpu(cfg: RunConfig, cluster_gpus: float) -> bool:
    """Whether the ranks run on GPUs: ``model.device: cuda``, or ``auto`` where the Ray
    cluster has GPUs."""
    return cfg.model.device == "cuda" or (cfg.model.device == "auto" and cluster_gpus > 0)


def rank_resources(workers: int, gpu: bool, trial: dict[str, float] | None = None) -> dict[str, float]:
    """One rank's Ray resources: its share of a trial's (``trial``: the study file's
    per-trial ``resources`` as ``Resources.ray()`` gives them), else one CPU and, on GPUs,
    one GPU."""
    if trial is None:
        return {"CPU": 1.0, **({"GPU": 1.0} if gpu else {})}
    cpus, gpus = float(trial.get("cpu", 1.0)) - TRIAL_CPU, float(trial.get("gpu", 0.0))
    if gpu and gpus < workers:
        raise ConfigError(f"resources.gpus: {gpus:g} GPUs a trial cannot give each of parallel.workers={workers} "
                          f"ranks a GPU; set resources.gpus to {workers} (resources are per trial)")
    share = {"CPU": cpus / workers}
    if gpus:
        share["GPU"] = gpus / workers
    for name, amount in trial.items():
        if name not in ("cpu", "gpu"):
            share[name] = amount / workers
    return share


def trial_concurrency(trial: dict[str, float], cluster: dict[str, float]) -> int:
    """How many parallel trials of ``trial``'s size fit the cluster at once: its GPUs over a
    trial's GPUs (its CPUs over a trial's CPUs without GPUs), at least one."""
    if trial.get("gpu", 0.0) > 0:
        return max(1, math.floor(cluster.get("GPU", 0.0) / trial["gpu"] + 1e-9))
    return max(1, math.floor(cluster.get("CPU", 1.0) / max(trial.get("cpu", 1.0), 1e-9) + 1e-9))


def _rank_main(config: dict) -> None:
    """One rank (a Ray Train worker): train the run, rank 0 writes its result for the
    launcher; the others' output goes to ``rank<r>.log``."""
    # deferred: Ray and torch load in the rank's worker, not where this module is imported
    import ray.train

    from trainer.run.loop import train  # deferred: torch, in the rank's worker

    cfg = from_dict(config["cfg"])
    rank = ray.train.get_context().get_world_rank()
    out = Path(cfg.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    if rank:
        log = open(out / f"rank{rank}.log", "a", buffering=1)
        sys.stdout = sys.stderr = log
    result = train(cfg, run_id=config["run_id"], resume=config["resume"], progress=config["progress"] and not rank)
    if rank == 0:
        data = {"run_id": result.run_id, "status": result.status, "final_metrics": result.final_metrics}
        tmp = out / f"{RESULT_FILE}.tmp"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, out / RESULT_FILE)


def train_on_ranks(cfg: RunConfig, *, run_id: str | None = None, resume: bool = False, progress: bool = True,
                   trial_resources: dict[str, float] | None = None) -> RunResult:
    """Train ``cfg`` on ``cfg.parallel.workers`` ranks started by Ray Train on the Ray this
    process is connected to; return rank 0's result. ``trial_resources``: the study's
    per-trial resources when called inside a trial. Raises :class:`RanksFailed` when a rank
    raised."""
    # deferred: Ray Train loads only for a parallel run (parallel.workers 1 never imports Ray)
    import ray
    from ray.train import FailureConfig, ScalingConfig
    from ray.train import RunConfig as TrainRunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    # deferred: trainer.run.loop imports torch
    from trainer.run.loop import RunResult

    workers = cfg.parallel.workers
    gpu = wants_gpu(cfg, ray.cluster_resources().get("GPU", 0.0))
    out = Path(cfg.output.dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_FILE).unlink(missing_ok=True)
    trainer = TorchTrainer(
        _rank_main,
        train_loop_config={"cfg": to_dict(cfg), "run_id": run_id, "resume": resume, "progress": progress},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpu,
                                     resources_per_worker=rank_resources(workers, gpu, trial_resources)),
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        run_config=TrainRunConfig(name=f"ranks-{run_id or 'run'}", storage_path=str(out / "ray_train"),
                                  failure_config=FailureConfig(max_failures=0)),
    )
    try:
        trainer.fit()
    except Exception as exc:  # Ray Train's error carries each failed rank's traceback
        raise RanksFailed(f"{workers} ranks of {cfg.algo.method}/{cfg.env.name} failed: {exc}") from None
    done = out / RESULT_FILE
    if not done.is_file():
        raise RanksFailed(f"rank 0 ended without writing {done}")
    return RunResult(**json.loads(done.read_text()))
