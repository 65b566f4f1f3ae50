"""Rank correlation: Spearman rho, its weighted form over bootstrap multiplicities, and a
cluster-bootstrap interval that resamples whole trajectories. Pure numpy/scipy.

:func:`analysis.alignment.regional_alignment` and ``diagnostics.value_alignment`` correlate turn-level
OPD gaps and gates with step advantages and returns; the turns of one trajectory are not
independent, so intervals resample trajectories (clusters), every resample at once as a
weighted rank correlation (:func:`weighted_spearman`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

_BOOT_CELLS = 2_000_000  # bootstrap rows x turns processed at once


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rho = Pearson correlation of average ranks; NaN if n < 3 or constant."""
    if x.size < 3:
        return math.nan
    rx, ry = sps.rankdata(x), sps.rankdata(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def cluster_spearman_ci(x, y, codes, n_boot, confidence, seed) -> tuple[float, float]:
    """Percentile CI of Spearman rho, resampling clusters (trajectories) with replacement.

    ``x``, ``y``: [n_turns]; ``codes``: [n_turns] cluster index 0..C-1. A resample is
    represented by multiplicities: W[b, i] = how often turn i's cluster was drawn in
    resample b, so rho of the expanded resample is a weighted rank correlation computed for
    all resamples at once. Undefined resamples are ignored; NaN with fewer than 2 clusters.
    """
    n_clusters = int(codes.max()) + 1 if codes.size else 0
    if n_clusters < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, n_clusters, size=(n_boot, n_clusters))  # [B, C]
    chunk = max(1, _BOOT_CELLS // max(codes.size, n_clusters))  # bound memory to ~[chunk, n]
    rhos = np.concatenate([_resample_rhos(x, y, codes, pick[b:b + chunk])
                           for b in range(0, n_boot, chunk)])
    rhos = rhos[np.isfinite(rhos)]
    if rhos.size == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(rhos, [tail, 1.0 - tail])
    return float(low), float(high)


def _resample_rhos(x, y, codes, pick) -> np.ndarray:
    """Spearman rho of each cluster resample; ``pick``: [b, C] drawn cluster indices."""
    n_rows, n_clusters = pick.shape
    flat = (pick + n_clusters * np.arange(n_rows)[:, None]).ravel()
    counts = np.bincount(flat, minlength=n_rows * n_clusters).reshape(n_rows, n_clusters)
    return weighted_spearman(x, y, counts[:, codes].astype(float))  # weights [b, n_turns]


def _value_weights(x: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct value of ``x`` (ascending), its total weight in each row.

    ``x``: [n]; ``weights``: [B, n]. Returns ``per_value`` [B, U] and ``inverse`` [n] (the
    index of x[i] among the U distinct values). One sort and one ``reduceat`` over the
    columns grouped by value (no ``np.add.at``, which is slow on [B, n])."""
    values, inverse = np.unique(x, return_inverse=True)  # [U], [n]
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(values.size))  # every value occurs
    return np.add.reduceat(weights[:, order], starts, axis=1), inverse


def weighted_ranks(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties averaged) of x inside each row's expanded sample.

    ``x``: [n]; ``weights``: [B, n] non-negative integer multiplicities. Returns [B, n]:
    the rank each value would get in the sample that repeats x[i] weights[b, i] times.
    """
    per_value, inverse = _value_weights(x, weights)  # [B, U]
    below = np.cumsum(per_value, axis=1) - per_value  # weight strictly below each value
    return (below + (per_value + 1.0) / 2.0)[:, inverse]  # [B, n]


def weighted_spearman(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Spearman rho of each row's expanded sample; [B]; NaN when a side is constant.

    In a sample of N values the average ranks have mean (N + 1) / 2 and sum of squared
    deviations (N^3 - N - sum_ties (t^3 - t)) / 12 (t: the size of a group of equal values),
    so only the cross term sum_i w_i rx_i ry_i needs a pass over [B, n]."""
    total = weights.sum(axis=1)  # [B] = N
    half = (total + 1.0) / 2.0
    ranks, ties = [], []
    for v in (x, y):
        per_value, inverse = _value_weights(v, weights)  # [B, U]
        below = np.cumsum(per_value, axis=1) - per_value
        ranks.append((below + (per_value + 1.0) / 2.0)[:, inverse])  # [B, n]
        ties.append((per_value ** 3 - per_value).sum(axis=1))
    cov = ((weights * ranks[0]) * ranks[1]).sum(axis=1) - total * half * half
    cube = total ** 3 - total
    var = ((cube - ties[0]) / 12.0) * ((cube - ties[1]) / 12.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = cov / np.sqrt(var)
    return np.where((var > 1e-12) & (total >= 3), rho, np.nan)
