"""What :func:`trainer.run.loop.train` does differently on data-parallel ranks: shard the
policy before any stage trains it, refuse what is not sharded yet, and let
only rank 0 talk to MLflow (the others get a :class:`SilentLogger`)."""

from __future__ import annotations

from trainer.config import RunConfig
from trainer.parallel.group import active, check_workers, initialized, select_device
from trainer.parallel.shard import broadcast_module, is_sharded, shard


def prepare_rank(cfg: RunConfig) -> bool:
    """Check the process group (if any) against ``parallel.workers``; on data-parallel
    ranks pick this rank's device and refuse what is not sharded yet.  Returns whether this
    run is data parallel."""
    if initialized():
        check_workers(cfg.parallel.workers)
    if not active():
        return False
    select_device()
    if cfg.writer.keeps_snapshot:
        raise ValueError("parallel.workers > 1 does not support a writer snapshot of the policy yet "
                         "(writer.kind frozen, or self with writer.refresh_every != 1)")
    return True


def shard_policy(ctx) -> None:
    """Rank 0's policy (and reference, when there is one) on every rank, then each sharded
    (FSDP2); :func:`trainer.run.loop.train` calls it right after building the components, so
    that the warm start, Stage 1 and RL all train the shards (each stage builds AdamW on
    them) and :func:`~trainer.run.components.start_rl` freezes the reference from them."""
    for model in (ctx.model, ctx.reference):
        if model is not None and not is_sharded(model):  # a reference built sharded is already
            broadcast_module(model)
            shard(model)


class SilentLogger:
    """A :class:`~trainer.run.tracking.RunLogger` that logs nothing (ranks other than 0)."""

    def __init__(self, run_id: str = ""):
        self.run_id = run_id

    def _nothing(self, *args, **kwargs) -> None:
        return None

    log_metrics = log_params = log_dict = log_text = log_artifact = log_artifacts = _nothing
    set_tags = flush = fail = finish = _nothing
