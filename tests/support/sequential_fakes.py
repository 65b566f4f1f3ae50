"""A fake train function for the ``seeds:`` plan's sweep tests (the signature of
``trainer.run.train``): each method's held-out success by seed is fixed, so the rule's
decisions are known in advance. SEED sits 30 points above GRPO (decided different at the
first look); ETRO wanders within 2 points of GRPO (undecided until ``max``)."""

from __future__ import annotations

from support.sweeps_fakes import FakeResult
from trainer.run.tracking import RunLogger

GRPO = (0.50, 0.52, 0.47, 0.51, 0.49, 0.50, 0.53)
ETRO_OFFSET = (0.01, -0.02, 0.015, -0.005, 0.0, 0.02, -0.01)


def success(method: str, seed: int) -> float:
    base = GRPO[seed % len(GRPO)]
    if method == "seed":
        return base + 0.30 + 0.005 * (seed % 2)
    if method == "etro":
        return base + ETRO_OFFSET[seed % len(ETRO_OFFSET)]
    return base


def planned_train(cfg, *, run_id=None, resume=False, progress=True):
    """Log one step and the held-out success of the method and seed."""
    logger = RunLogger(cfg.tracking.uri, cfg.tracking.experiment)
    run_id = logger.start(cfg, run_id=run_id)
    final = {"eval/eval_unseen/success": success(cfg.algo.method, cfg.seed)}
    with logger:
        logger.log_metrics(0, {"train/success": 0.5})
        logger.log_metrics(1, final)
    return FakeResult(run_id, "FINISHED", final)
