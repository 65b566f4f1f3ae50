"""Fake train functions for the sweep tests (same signature as ``trainer.run.train``).

Importable by Ray workers (module-level functions) and runnable as a driver script (the
SIGKILL, cluster, two-driver and Ray-token tests): ``python tests/support/sweeps_fakes.py STUDY.yaml
[slow|counted|node|attach]``.

Behaviour is chosen by config fields the fakes never otherwise read:
``writer.model == "fail"`` always raises; ``"fail_once"`` raises on the first attempt only
(a marker file in ``output.dir``), so ``--retry-failed`` can succeed.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repo root and tests/ importable
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from trainer.run.tracking import RunLogger

STEPS = 3


@dataclass
class FakeResult:
    run_id: str
    status: str
    final_metrics: dict = field(default_factory=dict)


def fake_success(cfg) -> float:
    """Deterministic stand-in for a training outcome: depends on beta_opd and seed."""
    return round(0.1 * cfg.algo.beta_opd + 0.01 * cfg.seed, 6)


def _maybe_fail(cfg) -> None:
    if cfg.writer.model == "fail":
        raise RuntimeError("boom: injected failure")
    if cfg.writer.model == "fail_once":
        marker = Path(cfg.output.dir) / "failed_once"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("x")
            raise RuntimeError("boom once: injected failure")


def fake_train(cfg, *, run_id=None, resume=False, progress=True, steps=STEPS, sleep=0.0):
    """Log ``steps`` steps of metrics through RunLogger; resumable from a JSON checkpoint
    ``<output.dir>/fake_ckpt.json`` holding the next step."""
    logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
    run_id = logger.start(cfg, run_id=run_id)
    ckpt = Path(cfg.output.dir) / "fake_ckpt.json"
    first = json.loads(ckpt.read_text())["next"] if resume and ckpt.exists() else 0
    with logger:
        _maybe_fail(cfg)
        success = fake_success(cfg)
        for step in range(first, steps):
            time.sleep(sleep)
            logger.log_metrics(step, {"train/success": success * (step + 1) / steps,
                                      "train/score": float(step)})
            logger.flush()
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            ckpt.write_text(json.dumps({"next": step + 1}))
        final = {"eval/eval_unseen/success": success}
        logger.log_metrics(steps, final)
    return FakeResult(run_id, "FINISHED", final)


def slow_train(cfg, *, run_id=None, resume=False, progress=True):
    """6 steps of 0.5 s: long enough to kill the driver mid-study."""
    return fake_train(cfg, run_id=run_id, resume=resume, progress=progress, steps=6, sleep=0.5)


def timed_train(cfg, *, run_id=None, resume=False, progress=True):
    """fake_train of 2 steps of 1.5 s that writes when it started and ended (wall clock,
    its trial's own time) to ``<output.dir>/timed.json``."""
    start = time.time()
    result = fake_train(cfg, run_id=run_id, resume=resume, progress=progress, steps=2, sleep=1.5)
    Path(cfg.output.dir, "timed.json").write_text(json.dumps({"start": start, "end": time.time()}))
    return result


CHATTER = "Loading weights: model.safetensors"


def chatty_train(cfg, *, run_id=None, resume=False, progress=True):
    """fake_train that talks as a real trial does: a print, a logging warning and a tqdm bar
    (weight loading), on stdout and stderr."""
    import logging

    from tqdm import tqdm

    print(f"{CHATTER} (print, seed {cfg.seed})", flush=True)
    logging.getLogger("transformers").warning("%s (logging)", CHATTER)
    for _ in tqdm(range(3), desc=CHATTER, file=sys.stderr):
        pass
    return fake_train(cfg, run_id=run_id, resume=resume, progress=progress)


def node_train(cfg, *, run_id=None, resume=False, progress=True):
    """fake_train that records, while it runs (2 s), how many trials run on its Ray node at
    once (files under ``<study out>/active/<node id>/``), as the metric ``node_concurrency``,
    and how many GPUs Ray gave it, as ``gpus_seen``."""
    import os

    import ray

    node = ray.get_runtime_context().get_node_id()
    active = Path(cfg.output.dir).parents[1] / "active" / node
    active.mkdir(parents=True, exist_ok=True)
    mine = active / Path(cfg.output.dir).name
    mine.write_text(str(os.getpid()))
    try:
        seen = 0
        for _ in range(8):
            seen = max(seen, len(list(active.iterdir())))
            time.sleep(0.25)
        result = fake_train(cfg, run_id=run_id, resume=resume, progress=progress)
    finally:
        mine.unlink()
    logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
    logger.client.log_metric(result.run_id, "node_concurrency", seen)
    logger.client.log_metric(result.run_id, "gpus_seen", len(ray.get_gpu_ids()))
    return result


def counted_train(cfg, *, run_id=None, resume=False, progress=True):
    """fake_train that appends ``<cell id> <seed>`` to ``<study out>/trainings.txt`` each
    time it trains a pair (the distributed-search test counts duplicates there)."""
    from trainer.run.tracking import cell_id

    with open(Path(cfg.output.dir).parents[1] / "trainings.txt", "a") as out:
        out.write(f"{cell_id(cfg)} {cfg.seed}\n")
    return fake_train(cfg, run_id=run_id, resume=resume, progress=progress, steps=3, sleep=0.3)


def attach_train(cfg, *, run_id=None, resume=False, progress=True):
    """fake_train that first leaves what a process of the sweep's Ray knows (its token,
    the GCS address, Ray's session folder) in ``$HS_ATTACH_DIR/<study out>.json`` for the
    token-authentication test, then waits (10 min at most) for ``<study out>.go`` there."""
    import os

    import ray

    folder = Path(os.environ["HS_ATTACH_DIR"])
    name = Path(cfg.output.dir).parents[1].name
    node = ray._private.worker.global_worker.node  # Ray has no public call for the folder
    info = {"token": os.environ.get("RAY_AUTH_TOKEN", ""),
            "mode": os.environ.get("RAY_AUTH_MODE", ""),
            "gcs": ray.get_runtime_context().gcs_address, "session": node.get_session_dir_path()}
    (folder / f"{name}.json.tmp").write_text(json.dumps(info))
    (folder / f"{name}.json.tmp").rename(folder / f"{name}.json")
    deadline = time.time() + 600
    while not (folder / f"{name}.go").exists() and time.time() < deadline:
        time.sleep(0.2)
    return fake_train(cfg, run_id=run_id, resume=resume, progress=progress)


def pruned_train(cfg, *, run_id=None, resume=False, progress=True, on_eval=None):
    """fake_train that evaluates every ``eval.every`` of ``stages.rl.steps`` steps as the
    trainer does (``eval/eval_unseen/success`` = fake_success x step / steps, 0.3 s a step),
    hands each evaluation before the last step to ``on_eval`` and ends KILLED when it says
    stop (a search's pruner)."""
    logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
    run_id = logger.start(cfg, run_id=run_id)
    steps, every, success = cfg.stages.rl.steps, cfg.eval.every, fake_success(cfg)
    for step in range(1, steps + 1):
        time.sleep(0.3)
        metrics = {"train/success": success}
        if step % every == 0 or step == steps:
            metrics["eval/eval_unseen/success"] = success * step / steps
        logger.log_metrics(step, metrics)
        if step < steps and step % every == 0 and on_eval is not None \
                and on_eval(step, {k: v for k, v in metrics.items() if k.startswith("eval/")}):
            logger.finish("KILLED")
            return FakeResult(run_id, "KILLED", {})
    logger.finish("FINISHED")
    return FakeResult(run_id, "FINISHED", {"eval/eval_unseen/success": success})


def main(argv: list[str]) -> int:
    from support import sweeps_fakes as fakes  # by module name: Ray pickles them by reference
    from sweeps.runner import run_study
    from sweeps.study import load_study

    train = {"slow": fakes.slow_train, "counted": fakes.counted_train, "node": fakes.node_train,
             "attach": fakes.attach_train}.get(argv[1] if len(argv) > 1 else "", fakes.fake_train)
    status = run_study(load_study(argv[0]), train_fn=train)
    return 0 if status is not None and status.complete else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
