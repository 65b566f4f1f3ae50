"""Summaries of ETRO's recovery protocol (:mod:`trainer.recovery`'s per-continuation frame).

Continuations of one task are not independent, so every statistic is computed over tasks:
the mean over a task's repeats first, then the mean over tasks with a Student t 95%
interval (``n`` = tasks).  Pure pandas / numpy.
"""

from __future__ import annotations

import pandas as pd

from analysis.stats import mean_ci

METRICS = ("success", "score", "wrong_branch", "invalid_first", "entropy")


def summarize_recovery(frame: pd.DataFrame, by: str = "label") -> pd.DataFrame:
    """Long frame ``label, metric, n_tasks, n_continuations, mean, ci_low, ci_high`` in the
    order the labels first appear."""
    missing = [c for c in (by, "task_id", *METRICS) if c not in frame.columns]
    if missing:
        raise ValueError(f"columns {missing} not in the recovery frame; has {list(frame.columns)}")
    rows = []
    for label in dict.fromkeys(frame[by]):
        part = frame[frame[by] == label]
        per_task = part.groupby("task_id", sort=False)[list(METRICS)].mean()
        for metric in METRICS:
            values = per_task[metric].dropna().to_numpy(float)
            low, high = mean_ci(values, "t")
            rows.append({by: label, "metric": metric, "n_tasks": int(values.size),
                         "n_continuations": int(part[metric].notna().sum()),
                         "mean": float(values.mean()) if values.size else float("nan"),
                         "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows)
