"""Per-turn records: one row per turn of a batch of trajectories (the Parquet artifact that
the diagnostics read; columns listed in :data:`COLUMNS`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import torch

from envs.base import Hindsight, first_unrecovered_error
from trainer.episodes.samples import Trajectory

GAMMA = 0.95
COLUMNS = (
    "step", "split", "task_id", "group", "traj", "turn", "state_key", "action", "reward", "return",
    "success", "error_turn_writer", "error_turn_true", "delta_pos", "delta_neg", "gate_mean", "region",
)


def discounted_returns(rewards: Sequence[float], gamma: float = GAMMA) -> list[float]:
    """G_t = sum_{s >= t} gamma^(s - t) r_s for every turn t."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def region(turn: int, success: bool, boundary: int | None) -> str:
    if success:
        return "success"
    if boundary is None:
        return "no_boundary"
    return "prefix" if turn < boundary else ("error" if turn == boundary else "suffix")


def turn_means(values: torch.Tensor | None, turn_ids: torch.Tensor, mask: torch.Tensor, row: int, turn: int) -> float:
    """Mean of ``values[row]`` over the action tokens of ``turn`` (NaN if absent)."""
    if values is None:
        return math.nan
    sel = (turn_ids[row] == turn) & mask[row].bool()
    return float(values[row][sel].mean()) if sel.any() else math.nan


def build_records(
    step: int,
    split: str,
    trajectories: Sequence[Trajectory],
    group_ids: Sequence[int],
    hindsights: Sequence[Hindsight] | None = None,
    deltas: Mapping[str, torch.Tensor] | None = None,
    turn_ids: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    beta: float = 5.0,
) -> pd.DataFrame:
    """Rows for every turn of ``trajectories``; deltas/turn_ids/mask are the [B, T] tensors
    of the training batch (absent for evaluation episodes)."""
    deltas = deltas or {}
    pos, neg = deltas.get("positive"), deltas.get("negative")
    primary = pos if pos is not None else deltas.get("privileged")
    gate = None if primary is None else torch.sigmoid(beta * primary)
    rows = []
    for b, (traj, group) in enumerate(zip(trajectories, group_ids)):
        episode = traj.episode
        h = hindsights[b] if hindsights is not None else None
        boundary = h.error_turn if h is not None and h.valid else None
        truth = first_unrecovered_error(episode.distances, episode.success)
        returns = discounted_returns([t.reward for t in episode.turns])
        for t, turn in enumerate(episode.turns):
            scored = turn_ids is not None and (h is None or h.valid)
            rows.append({
                "step": step, "split": split, "task_id": episode.task.id, "group": int(group), "traj": b,
                "turn": t, "state_key": turn.state_key, "action": turn.action, "reward": turn.reward,
                "return": returns[t], "success": bool(episode.success),
                "error_turn_writer": -1 if boundary is None else boundary,
                "error_turn_true": -1 if truth is None else truth,
                "delta_pos": turn_means(pos, turn_ids, mask, b, t) if scored else math.nan,
                "delta_neg": turn_means(neg, turn_ids, mask, b, t) if scored and boundary is not None else math.nan,
                "gate_mean": turn_means(gate, turn_ids, mask, b, t) if scored else math.nan,
                "region": region(t, episode.success, boundary),
            })
    return pd.DataFrame(rows, columns=list(COLUMNS))
