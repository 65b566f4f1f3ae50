"""Aggregates across tasks and environments (rliable; Agarwal et al., 2021).

A *task* is one evaluation column of the tables (an env's success, a QA dataset, a shop
score); a method's scores form, per task, an array over its seeds. Every interval is a
**stratified** percentile bootstrap: seeds are resampled within each task independently
(and, for comparisons, independently for each method), ``n_boot`` resamples, seeded.

* IQM: :func:`analysis.stats.iqm_ci` over all (seed, task) scores.
* Probability of improvement P(X > Y) = mean over tasks of the Mann-Whitney statistic
  P(X_m > Y_m) + 1/2 P(X_m = Y_m) over all pairs of seeds (rliable's
  ``probability_of_improvement``); only tasks both methods have count.
* Performance profile: for each threshold tau, the fraction of (seed, task) scores above
  tau, averaged over tasks first (each task weighs the same, as rliable's
  ``create_performance_profile`` with ``use_score_distribution=True``).

:func:`row_aggregates` computes all three for every row of a report's tables (a variant of
the prepared run frame), per backbone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.diagnostics import Skipped
from analysis.stats import check_bootstrap, finite, iqm_ci, percentile_interval

Tasks = Mapping[str, np.ndarray]  # task -> scores over seeds
TAUS = tuple(np.round(np.linspace(0.0, 1.0, 41), 3))  # performance-profile thresholds


def task_scores(runs: pd.DataFrame, row: str, tasks: Sequence[str], *,
                seed: str = "seed") -> dict[str, dict[str, np.ndarray]]:
    """row value -> task -> scores over seeds (runs of one seed averaged; NaN dropped)."""
    per_seed = runs.groupby([row, seed], sort=True)[list(tasks)].mean()
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, part in per_seed.groupby(level=0, sort=False):
        scores = {t: finite(part[t].to_numpy(float)) for t in tasks}
        out[key] = {t: x for t, x in scores.items() if x.size}
    return out


def probability_of_improvement(x: Tasks, y: Tasks, *, n_boot: int = 2000,
                               confidence: float = 0.95, seed: int = 0
                               ) -> tuple[float, float, float]:
    """P(X > Y) averaged over the tasks both have, with a stratified bootstrap CI.

    E.g. x = {"a": [1, 2]}, y = {"a": [0, 2]}: pairs (1,0) > , (1,2) <, (2,0) >, (2,2) =
    -> (1 + 0 + 1 + 0.5) / 4 = 0.625. Returns NaNs when no task is shared.
    """
    check_bootstrap(n_boot, confidence)
    shared = [t for t in x if t in y and len(x[t]) and len(y[t])]
    if not shared:
        return math.nan, math.nan, math.nan
    point = float(np.mean([_mann_whitney(np.asarray(x[t]), np.asarray(y[t])) for t in shared]))
    if max(len(x[t]) for t in shared) < 2 and max(len(y[t]) for t in shared) < 2:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boot = np.zeros(n_boot)
    for t in shared:
        a, b = np.asarray(x[t], float), np.asarray(y[t], float)
        xa = a[rng.integers(0, a.size, size=(n_boot, a.size))]  # [n_boot, n_x]
        yb = b[rng.integers(0, b.size, size=(n_boot, b.size))]  # [n_boot, n_y]
        boot += _mann_whitney_rows(xa, yb)
    return (point, *percentile_interval(boot / len(shared), confidence))


def _mann_whitney_rows(xa: np.ndarray, yb: np.ndarray) -> np.ndarray:
    """P(x > y) + P(x = y) / 2 per row from rank sums: with average ranks R of x in the
    pooled row, the count of (x > y) pairs plus half the ties is R - n_x (n_x + 1) / 2.
    ``xa``: [B, n_x], ``yb``: [B, n_y]; returns [B]. O(n log n) per row, not O(n_x n_y)."""
    nx, ny = xa.shape[1], yb.shape[1]
    ranks = sps.rankdata(np.concatenate([xa, yb], axis=1), axis=1)  # [B, n_x + n_y]
    return (ranks[:, :nx].sum(axis=1) - nx * (nx + 1) / 2.0) / (nx * ny)


def _mann_whitney(a: np.ndarray, b: np.ndarray) -> float:
    diff = a[:, None] - b[None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def _above(draw: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Per row of ``draw`` [B, n], the fraction of values above each tau: [B, n_tau].

    A value exceeds tau_j iff j < (number of taus below it); counting values per such bin
    and summing from the right gives every tau at once, O(B (n + n_tau)) instead of
    O(B n n_tau). ``taus`` must be sorted ascending."""
    n_rows, n = draw.shape
    bins = np.searchsorted(taus, draw, side="left")  # [B, n] in 0..n_tau
    width = taus.size + 1
    counts = np.bincount((bins + width * np.arange(n_rows)[:, None]).ravel(),
                         minlength=n_rows * width).reshape(n_rows, width)
    above = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # values with bin >= k
    return above[:, 1:] / n  # tau_j: values with bin >= j + 1


def performance_profile(tasks: Tasks, taus: Sequence[float], *, n_boot: int = 2000,
                        confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Fraction of scores above each tau (mean over tasks of the per-task fraction) with a
    stratified bootstrap band. Columns: tau, fraction, low, high."""
    check_bootstrap(n_boot, confidence)
    taus = np.asarray(taus, dtype=float)
    arrays = [np.asarray(v, float) for v in tasks.values() if len(v)]
    if not arrays:
        return pd.DataFrame(columns=["tau", "fraction", "low", "high"])
    point = np.mean([(a[:, None] > taus[None, :]).mean(axis=0) for a in arrays], axis=0)
    rng = np.random.default_rng(seed)
    boot = np.zeros((n_boot, taus.size))
    for a in arrays:
        draw = a[rng.integers(0, a.size, size=(n_boot, a.size))]  # [n_boot, n]
        boot += _above(draw, taus)
    boot /= len(arrays)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail], axis=0)
    return pd.DataFrame({"tau": taus, "fraction": point, "low": low, "high": high})


def aggregates(scores: Mapping[str, Tasks], baseline: str | None, *, n_boot: int = 2000,
               seed: int = 0) -> pd.DataFrame:
    """One row per row value: n_tasks, IQM with its stratified CI and, against
    ``baseline`` (a row value), P(improvement) with its CI."""
    rows = []
    for key, tasks in scores.items():
        point, low, high = iqm_ci(list(tasks.values()), n_boot=n_boot, seed=seed)
        poi = (math.nan,) * 3
        if baseline is not None and baseline in scores and key != baseline:
            poi = probability_of_improvement(tasks, scores[baseline], n_boot=n_boot, seed=seed)
        rows.append((key, len(tasks), point, low, high, *poi))
    return pd.DataFrame(rows, columns=["row", "n_tasks", "iqm", "iqm_low", "iqm_high",
                                       "p_improve", "p_improve_low", "p_improve_high"])


def row_aggregates(runs: pd.DataFrame, tasks: Sequence[str], *, baseline: str = "grpo",
                   n_boot: int = 2000, seed: int = 0
                   ) -> tuple[pd.DataFrame, pd.DataFrame] | Skipped:
    """Per backbone, across the ``tasks`` columns of the prepared run frame (every env and
    dataset column of the tables): each table row's (``variant``'s) IQM and P(improvement
    over the ``baseline`` method's row, when it has one), and its performance profile over
    TAUS. Returns (aggregates: backbone, method, variant, n_tasks, iqm..., p_improve...;
    profiles: backbone, method, variant, tau, fraction, low, high)."""
    name = "aggregates"
    if not tasks or "variant" not in runs.columns:
        return Skipped(name, "runs have no evaluation metric")
    if runs.groupby("backbone")["variant"].nunique().max() < 2:
        return Skipped(name, "a single table row per backbone; nothing to aggregate against")
    methods = runs.drop_duplicates("variant").set_index("variant")["method"]
    agg, prof = [], []
    for backbone, part in runs.groupby("backbone", sort=True):
        scores = task_scores(part, "variant", list(tasks))
        bases = [v for v in scores if methods[v] == baseline]
        frame = aggregates(scores, bases[0] if len(bases) == 1 else None, n_boot=n_boot,
                           seed=seed)
        agg.append(frame.rename(columns={"row": "variant"}).assign(backbone=backbone))
        for variant, per_task in scores.items():
            p = performance_profile(per_task, TAUS, n_boot=n_boot, seed=seed)
            prof.append(p.assign(backbone=backbone, variant=variant))
    agg_frame = pd.concat(agg, ignore_index=True)
    prof_frame = pd.concat(prof, ignore_index=True)
    for frame in (agg_frame, prof_frame):
        frame["method"] = frame["variant"].map(methods)
    return agg_frame, prof_frame
