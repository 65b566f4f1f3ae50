"""The metrics of one RL step besides its loss: rollout and writer figures, the engine/trainer
log-prob gap of sampled tokens, distinct samples per group, performance and memory.
"""

from __future__ import annotations

import math
import resource

import torch

from trainer.episodes.samples import Trajectory
from trainer.episodes.scoring import (
    ActionBatch,
)
from trainer.run.components import Components
from trainer.stages.phases import PhaseTimer
from trainer.stages.rl import StepBatch


def step_metrics(ctx: Components, batch: StepBatch, timer: PhaseTimer) -> dict[str, float]:
    """Rollout, writer and performance metrics of one step (loss metrics come from update)."""
    episodes = [t.episode for t in batch.trajectories]
    turns = [t for e in episodes for t in e.turns]
    mask = batch.old.mask
    metrics = {
        "train/success": _mean([e.success for e in episodes]),
        "train/score": _mean([e.score for e in episodes]),
        "train/reward": _mean([e.total_reward for e in episodes]),
        "train/episode_length": _mean([len(e.turns) for e in episodes]),
        "train/invalid_rate": _mean([not t.valid for t in turns]),
        # commands read as a similar admissible one (env.action_match: nearest; else 0)
        "train/matched_rate": _mean([bool(t.info.get("matched")) for t in turns]),
        "train/entropy": float((batch.old.entropy * mask).sum() / mask.sum().clamp(min=1)),
    }
    metrics.update(batch.adv_metrics)
    metrics.update(batch.skill_metrics)
    if batch.hindsights is not None:
        skills = [h.positive_skill for h in batch.hindsights if h.valid]
        metrics["writer/invalid_rate"] = _mean([not h.valid for h in batch.hindsights])
        metrics["writer/skill_tokens"] = _mean([len(ctx.tokenizer.encode(s)) for s in skills]) if skills else 0.0
        metrics["writer/boundary_rate"] = _mean([h.error_turn is not None for h in batch.hindsights if h.valid])
        metrics["writer/boundary_invalid_rate"] = _mean([not h.boundary_valid for h in batch.hindsights if h.valid])
    metrics.update(logprob_gap(batch.trajectories, batch.old))
    metrics["rollout/distinct_rate"] = distinct_rate(batch.trajectories, batch.group_ids)
    metrics["perf/tokens_per_s"] = batch.generated_tokens / max(timer.seconds.get("rollout", 0.0), 1e-9)
    metrics["perf/peak_mem_mb"] = peak_memory_mb()
    # what one scoring pass of the student contexts reads (each of score, reference, teacher
    # and update reads about as much), images included (model.max_image_tokens bounds each)
    metrics["perf/context_tokens"] = float(batch.context_tokens)
    metrics["perf/image_tokens"] = float(batch.image_tokens)
    # the step's scoring and update micro-batches (reference, teacher and replay included):
    # padded tokens over computed ones, and how many forwards ran
    metrics.update(timer.padding.metrics())
    metrics.update(timer.metrics())
    return metrics


def logprob_gap(trajectories: list[Trajectory], old: ActionBatch) -> dict[str, float]:
    """``rollout/logprob_diff_mean`` / ``_max``: |log-prob the backend sampled a token with -
    the trainer's old-policy log-prob of it| over the step's sampled tokens (verl's
    ``training/rollout_probs_diff_*``), from the log-probs the backend returned with its
    samples (:attr:`trainer.backend.Generation.logprobs`), never a re-score.  Near 0 when
    the engine holds the trainer's weights; it grows when the engine lags behind them."""
    engine = torch.zeros_like(old.logp)
    sampled = torch.zeros_like(old.mask, dtype=torch.bool)
    for row, traj in enumerate(trajectories):
        column = 0
        for ids, lps in zip(traj.response_ids, traj.logprobs or [()] * len(traj.response_ids)):
            if lps:
                engine[row, column:column + len(ids)] = torch.tensor(lps, dtype=engine.dtype)
                sampled[row, column:column + len(ids)] = True
            column += len(ids)
    keep = sampled & old.mask.bool()
    if not keep.any():
        return {}
    gap = (engine - old.logp).abs()[keep]
    return {"rollout/logprob_diff_mean": float(gap.mean()), "rollout/logprob_diff_max": float(gap.max())}


def distinct_rate(trajectories: list[Trajectory], group_ids: list[int]) -> float:
    """Mean over GRPO groups of (distinct trajectories / group size), a trajectory being its
    sampled token ids: 1 when every sample of a group differs, 1/G when a group got one sample
    G times (one seeded sampling for a whole call does that on vLLM)."""
    groups: dict[int, list] = {}
    for traj, group in zip(trajectories, group_ids):
        groups.setdefault(group, []).append(traj.response_ids)
    return _mean([len(set(members)) / len(members) for members in groups.values()])


def peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else math.nan
