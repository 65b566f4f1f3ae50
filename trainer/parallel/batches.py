"""Data parallelism of one RL step: each rank's share of the tasks, the global counts the
loss weights need, and the step's metrics reduced over the ranks.

Rank r plays the r-th contiguous block of the step's tasks (whole GRPO groups, so group
advantages need nothing from other ranks).  Its trajectories are rows ``offset .. offset+n``
of the step's global batch; the PPO minibatches are drawn over the global rows exactly as
one process draws them, each rank taking the rows it holds, and every aggregation weight
(:func:`~trainer.algos.aggregation_weights`) uses the minibatch's token and row counts summed
over the ranks, so the summed gradients equal the one-process gradient.
"""

from __future__ import annotations

import math

import torch

from trainer.parallel.group import active, all_max, all_sum, gather_objects, rank, world


def share_tasks(tasks: list) -> tuple[list, int]:
    """This rank's block of ``tasks`` and the index of its first task (one process: all, 0)."""
    if not active():
        return tasks, 0
    if len(tasks) % world():
        raise ValueError(f"rollout.tasks_per_step ({len(tasks)}) must be a multiple of parallel.workers "
                         f"({world()}): each rank plays whole GRPO groups, as many as the others")
    size = len(tasks) // world()
    return tasks[rank() * size:(rank() + 1) * size], rank() * size


def share_block(n: int) -> tuple[int, int, bool]:
    """This rank's block ``lo .. hi`` of ``n`` items (an evaluation panel's episodes), as
    even as possible, and whether the items are split at all: with fewer items than ranks
    every rank takes all of them (every rank must generate, an engine's weight push being
    a collective).  One process: ``(0, n, False)``."""
    if not active() or n < world():
        return 0, n, False
    return (*blocks(n)[rank()], True)


def blocks(n: int) -> list[tuple[int, int]]:
    """Every rank's contiguous block ``lo .. hi`` of ``n`` items, in rank order, as even as
    possible; with fewer items than ranks some blocks are empty.  One process:
    ``[(0, n)]``."""
    w = world() if active() else 1
    return [(r * n // w, (r + 1) * n // w) for r in range(w)]


def global_rows(n: int) -> tuple[int, int]:
    """(rows of the step's global batch, the global index of this rank's first row)."""
    if not active():
        return n, 0
    sizes = gather_objects(n)
    return sum(sizes), sum(sizes[:rank()])


def global_counts(mask: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The valid tokens and the rows with tokens of ``mask`` ([b, T], this rank's rows of a
    minibatch) summed over the ranks; (None, None) for one process (the own counts)."""
    if not active():
        return None, None
    m = mask.bool()
    tokens, rows = all_sum([float(m.sum()), float((m.sum(dim=1) > 0).sum())])
    return (torch.tensor(tokens, dtype=torch.float32, device=mask.device),
            torch.tensor(rows, dtype=torch.float32, device=mask.device))


def most(count: int) -> int:
    """The largest ``count`` of any rank (every rank runs as many micro-batches, so that the
    sharded model's collectives pair up; the extra ones weigh 0)."""
    return int(all_max(float(count))) if active() else count


def combine_loss_metrics(totals: dict[str, float], tokens: float, summed: tuple[str, ...],
                         maxed: tuple[str, ...]) -> tuple[dict[str, float], float]:
    """A minibatch's accumulated loss metrics and token count over all ranks: shares summed,
    maxima maximised, token-weighted means added (divided by the tokens afterwards)."""
    if not active():
        return totals, tokens
    out: dict[str, float] = {}
    parts = gather_objects((totals, tokens))
    for part, _ in parts:
        for key, value in part.items():
            if key in maxed:
                out[key] = max(out.get(key, -math.inf), value)
            else:
                out[key] = out.get(key, 0.0) + value
    return out, sum(t for _, t in parts)


# Step metrics that add up over ranks, and those whose worst rank is the figure; every other
# one is a mean over trajectories, turns or tokens of equal-sized shares: averaged.
SUMMED_STEP = ("perf/tokens_per_s", "perf/context_tokens", "perf/image_tokens", "skill/cut_count")
MAXED_STEP = ("perf/peak_mem_mb", "rollout/logprob_diff_max", "ppo/ratio_max")


def reduce_step_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """One value per key for the whole step (each rank's metrics of its own trajectories):
    sums for :data:`SUMMED_STEP`, maxima for :data:`MAXED_STEP` and the phase times
    (``time/*``: the slowest rank), means over the ranks that have the key otherwise."""
    if not active():
        return metrics
    out: dict[str, float] = {}
    gathered = gather_objects(metrics)
    for key in sorted({k for m in gathered for k in m}):
        values = [float(m[key]) for m in gathered if key in m]
        finite = [v for v in values if not math.isnan(v)]
        if not finite:
            out[key] = math.nan
        elif key in SUMMED_STEP:
            out[key] = sum(finite)
        elif key in MAXED_STEP or key.startswith("time/"):
            out[key] = max(finite)
        else:
            out[key] = sum(finite) / len(finite)
    return out
