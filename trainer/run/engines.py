"""The vLLM engines a run builds in its process, and which of them may sleep.

vLLM's sleep mode keeps an engine's weights and KV cache in one memory pool a process (its
``CuMemAllocator`` is a singleton): one engine's ``sleep()`` unmaps every allocation in that
pool, a second engine's included, and that engine's next ``generate`` reads freed memory.
So at most one engine a process sleeps: the policy's, which takes turns with the trainer
(DESIGN.md, "Memory hand-over on a GPU"). A writer that keeps a snapshot of the weights (a
frozen writer, a stale self writer: :attr:`~trainer.config.WriterConfig.keeps_snapshot`)
generates with an engine of its own, built without sleep mode: it stays resident through
every phase, and ``hindsight memory`` counts it so.  (The CPU build has no sleep mode: there
nothing sleeps and the plan is the same.)
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from trainer.config import ModelConfig, RunConfig

log = logging.getLogger("hindsight")


@dataclass(frozen=True)
class Engine:
    role: str  # "policy" or "writer snapshot"
    sleep_level: int  # 0 = never sleeps (stays resident)


def engine_plan(cfg: RunConfig) -> tuple[Engine, ...]:
    """The engines one process of the run builds: none on the transformers backend; the
    policy's (sleeping at ``model.vllm.sleep_level``) and, for a writer with a snapshot, the
    snapshot's, which never sleeps.  At most one engine of the plan sleeps."""
    if cfg.model.backend != "vllm":
        return ()
    engines = [Engine("policy", cfg.model.vllm.sleep_level)]
    if cfg.writer.keeps_snapshot:
        engines.append(Engine("writer snapshot", 0))
    return tuple(engines)


def snapshot_engine_config(cfg: RunConfig) -> ModelConfig:
    """The model settings a writer snapshot's engine is built with: the run's, at the sleep
    level :func:`engine_plan` gives it (so the plan is what runs); says so in one line when
    that differs from the policy's."""
    model = cfg.model
    snapshot = next((e for e in engine_plan(cfg) if e.role == "writer snapshot"), None)
    if snapshot is None or snapshot.sleep_level == model.vllm.sleep_level:
        return model
    log.warning("writer snapshot (writer.kind=%s, writer.refresh_every=%d): its vLLM engine stays awake "
                "through every phase; model.vllm.sleep_level=%d applies to the policy's engine alone "
                "(vLLM's sleep memory pool is one a process)", cfg.writer.kind, cfg.writer.refresh_every,
                model.vllm.sleep_level)
    return dataclasses.replace(model, vllm=dataclasses.replace(model.vllm, sleep_level=snapshot.sleep_level))
