"""Pruned search trials: the objective a search trial reports while it runs, which runs
belong to a pruned trial, and how many trials were pruned at which step.

A search's scheduler (``search.pruner``: Ray Tune's ASHA or median stopping) stops a trial
whose reported objective trails the others'; the sweep tags each run of a stopped trial
``pruned_at`` = the trial's training steps then (its seeds in turn), and clears the tag of
a run that a later trial of the same cell trained to the end.  A pruned trial's runs are
never used as a complete cell: :func:`without_pruned` drops every run of a cell that has one.
Pure pandas/numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

PRUNED_TAG = "pruned_at"  # MLflow tag of a pruned trial's runs; the loader's column of it
PRUNED_COLUMNS = ("pruned_at", "trials")
Z95 = 1.959963984540054  # two-sided 95% normal quantile


def objective(values: Sequence[float]) -> float:
    """A search trial's objective: the mean of its metric over its seeds; while it runs, over
    the seeds finished and the current seed's latest evaluation (what its pruner compares)."""
    if not len(values):
        raise ValueError("objective: no values (a trial reports after an evaluation)")
    return float(np.mean(np.asarray(values, dtype=float)))


def pruned_mask(runs: pd.DataFrame) -> pd.Series:
    """True for the runs of a pruned trial (a ``pruned_at`` value)."""
    if PRUNED_TAG not in runs.columns:
        return pd.Series(False, index=runs.index)
    return pd.to_numeric(runs[PRUNED_TAG], errors="coerce").notna()


def without_pruned(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` less every run of a cell (``cell_id``) that has a pruned run: a pruned trial's
    finished seeds are not a complete cell."""
    mask = pruned_mask(runs)
    if not mask.any():
        return runs
    cells = set(runs.loc[mask, "cell_id"]) if "cell_id" in runs.columns else set()
    keep = ~mask & ~runs["cell_id"].isin(cells) if cells else ~mask
    return runs[keep]


def pruned_trials(runs: pd.DataFrame) -> pd.DataFrame:
    """How many trials were pruned at which step: ``pruned_at, trials`` (a trial is a
    (cell, pruned_at) pair of tagged runs), ascending by step; empty when none was pruned."""
    mask = pruned_mask(runs)
    if not mask.any():
        return pd.DataFrame(columns=list(PRUNED_COLUMNS))
    part = runs.loc[mask].assign(pruned_at=pd.to_numeric(runs.loc[mask, PRUNED_TAG]).astype(int))
    key = [c for c in ("cell_id",) if c in part.columns] + ["pruned_at"]
    trials = part.drop_duplicates(key)
    counts = trials.groupby("pruned_at").size().rename("trials").reset_index()
    return counts.sort_values("pruned_at", ignore_index=True)


def steps_trained(histories: pd.DataFrame) -> pd.Series:
    """RL steps each run trained: the last step of its ``train/...`` history (``run_id, key,
    step, value``, :func:`analysis.loader.load_histories`); a pruned run's is where it stopped."""
    train = histories[histories["key"].str.startswith("train/")]
    return train.groupby("run_id")["step"].max().astype(int).rename("steps")


def success_difference(a: float, b: float, n: int) -> tuple[float, float, float]:
    """``a - b`` for two success rates each measured on ``n`` independent evaluation
    episodes, with its 95% normal interval (Wald: the binomial variance p(1-p)/n of each):
    the evaluation noise two searches' best values differ by when nothing else does."""
    if n < 1:
        raise ValueError(f"success_difference: n must be >= 1, got {n}")
    half = Z95 * float(np.sqrt((a * (1 - a) + b * (1 - b)) / n))
    return a - b, a - b - half, a - b + half
