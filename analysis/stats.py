"""Statistics over seeds and tasks: pure numpy/scipy, no plotting, no MLflow.

Conventions (Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice", the
rliable library):

* Per-cell results are mean and sample std (ddof=1) over seeds with a 95% **percentile
  bootstrap** CI of the mean (resampling seeds with replacement, seeded, ``n_boot``
  resamples). With a single seed there is nothing to resample: std and the CI are NaN.
* Aggregates over tasks/datasets use the **IQM** (interquartile mean, ``scipy.stats.
  trim_mean(x, 0.25)`` over all run x task scores) with a **stratified** bootstrap: runs are
  resampled within each task independently.
* Comparisons with a baseline are **paired by seed** (seeds present on one side only are
  dropped and ``n_paired`` is reported): a two-sided paired t-test, and a two-sided exact
  Wilcoxon signed-rank test when ``n`` is large enough for it to reach ``alpha``
  (2 / 2**n <= alpha, i.e. n >= 6 at 0.05). p-values are Holm-Bonferroni corrected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

TESTS = ("t", "wilcoxon")
SUMMARY_COLUMNS = ("n", "mean", "std", "ci_low", "ci_high", "n_paired", "diff_vs_baseline",
                   "p_vs_baseline", "p_holm", "significant", "not_worse_than_best")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1) of the finite values; std is NaN for fewer than 2."""
    x = _finite(values)
    if x.size == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else math.nan


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over the finite ``values`` (e.g. one per seed).

    Resamples ``n`` values with replacement ``n_boot`` times (``numpy.random.default_rng(seed)``,
    so the interval is deterministic) and returns the ``(1-confidence)/2`` and
    ``(1+confidence)/2`` quantiles of the resampled means. ``n < 2`` gives ``(nan, nan)``:
    one seed carries no information about spread, and we do not pretend it does.
    """
    x = _finite(values)
    _check_boot(n_boot, confidence)
    if x.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)  # [n_boot]
    return _percentile_interval(means, confidence)


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: mean of the middle 50% after dropping ``floor(n/4)`` at each end.

    Same definition as rliable (``scipy.stats.trim_mean(x, 0.25)`` on the flattened scores),
    so IQM([1..8]) = mean(3, 4, 5, 6) = 4.5.
    """
    x = _finite(np.ravel(np.asarray(values, dtype=float)))
    return float(sps.trim_mean(x, 0.25)) if x.size else math.nan


def iqm_ci(scores_per_task: Sequence[Sequence[float]], *, n_boot: int = 2000,
           confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """IQM over all (run, task) scores with a stratified percentile bootstrap CI.

    ``scores_per_task``: one array per task/dataset holding that task's per-run scores (runs
    may differ in number per task, unlike rliable's ``[n_runs, n_tasks]`` matrix). Each
    bootstrap resample draws, within every task independently, as many runs as it has, with
    replacement, and takes the IQM of the pooled resample. Returns ``(iqm, low, high)``;
    the interval is NaN when no task has 2 or more runs.
    """
    _check_boot(n_boot, confidence)
    tasks = [_finite(t) for t in scores_per_task]
    tasks = [t for t in tasks if t.size]
    if not tasks:
        return math.nan, math.nan, math.nan
    point = iqm(np.concatenate(tasks))
    if max(t.size for t in tasks) < 2:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = [t[rng.integers(0, t.size, size=(n_boot, t.size))] for t in tasks]  # [n_boot, n_t]
    pooled = np.concatenate(draws, axis=1)  # [n_boot, sum n_t]
    boot = sps.trim_mean(pooled, 0.25, axis=1)  # [n_boot]
    return (point, *_percentile_interval(boot, confidence))


@dataclass(frozen=True)
class PairedTest:
    """Result of a paired comparison ``a - b`` over the seeds both sides have."""

    n: int
    mean_diff: float
    p_t: float
    p_wilcoxon: float


def paired_test(a: dict, b: dict, *, alpha: float = 0.05) -> PairedTest:
    """Two-sided paired t-test and Wilcoxon signed-rank test of ``a[seed] - b[seed]``.

    ``a`` and ``b`` map a pairing key (the seed) to a value; keys present on one side only,
    and pairs with a NaN, are dropped. The t-test needs n >= 2 (NaN otherwise); when all
    differences are equal it gives p = 1 if they are 0 and p = 0 otherwise (the t statistic
    is infinite). Wilcoxon (exact) is reported when 2 / 2**n <= alpha, the smallest n at
    which it could reject, else NaN; all-zero differences give p = 1.
    """
    keys = sorted(k for k in set(a) & set(b)
                  if np.isfinite(a[k]) and np.isfinite(b[k]))
    d = np.array([a[k] - b[k] for k in keys], dtype=float)
    n = d.size
    mean_diff = float(d.mean()) if n else math.nan
    return PairedTest(n, mean_diff, _t_p(d), _wilcoxon_p(d, alpha))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1); NaN stays NaN.

    With m finite p-values sorted ascending p_(1) <= ... <= p_(m), the adjusted value is
    ``max_{j<=i} min(1, (m - j + 1) * p_(j))``. Reject H_(i) at level alpha iff adjusted
    p_(i) <= alpha. E.g. holm([0.01, 0.04, 0.03]) = [0.03, 0.06, 0.06].
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(np.isfinite(p))
    if idx.size == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def summarize(frame: pd.DataFrame, by: Sequence[str], metric: str, *,
              baseline: object | None = None, compare: str | None = None,
              pair_on: str = "seed", test: str = "t", alpha: float = 0.05,
              higher_is_better: bool = True, n_boot: int = 2000,
              seed: int = 0) -> pd.DataFrame:
    """One row per group of ``by``: n, mean, std, bootstrap CI and tests against a baseline.

    ``compare`` (default ``by[-1]``, typically ``"method"``) is the column whose levels
    compete; the other ``by`` columns form strata (e.g. env), and comparisons happen within
    a stratum. ``baseline`` is a level of ``compare`` (e.g. ``"grpo"``): every other group is
    tested against the baseline group of its stratum, paired on ``pair_on``
    (``test`` = ``"t"`` or ``"wilcoxon"`` chooses which p-value is used). ``p_holm`` corrects
    all baseline comparisons of the table as one family; ``significant`` = p_holm <= alpha.
    ``not_worse_than_best`` marks, within each stratum, the best mean and every group whose
    paired test against it does not reject at ``alpha`` (uncorrected; groups that cannot be
    tested -- too few paired seeds -- count as not worse). Rows with a NaN metric are dropped.
    """
    compare = _check_summary_args(frame, by, metric, compare, pair_on, test)
    data = frame.dropna(subset=[metric])
    strata = [c for c in by if c != compare]
    rows = []
    for keys, group in data.groupby(list(by), sort=True, dropna=False):
        values = group[metric].to_numpy(float)
        mean, std = mean_std(values)
        low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        rows.append({**dict(zip(by, _tuple(keys))), "n": len(values), "mean": mean,
                     "std": std, "ci_low": low, "ci_high": high})
    out = pd.DataFrame(rows, columns=[*by, "n", "mean", "std", "ci_low", "ci_high"])
    paired = _by_pair_key(data, by, metric, pair_on)
    pick = "p_t" if test == "t" else "p_wilcoxon"
    out = _baseline_columns(out, paired, by, compare, strata, baseline, pick, alpha)
    out["not_worse_than_best"] = _not_worse(out, paired, by, strata, pick, alpha,
                                            higher_is_better)
    return out[[*by, *SUMMARY_COLUMNS]]


# ---------------------------------------------------------------- helpers


def _finite(values) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def _check_boot(n_boot: int, confidence: float) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be a positive integer")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")


def _percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


def _t_p(d: np.ndarray) -> float:
    if d.size < 2:
        return math.nan
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(sps.ttest_1samp(d, 0.0).pvalue)


def _wilcoxon_p(d: np.ndarray, alpha: float) -> float:
    if d.size == 0 or 2.0 / 2.0 ** d.size > alpha:
        return math.nan
    if np.all(d == 0):
        return 1.0
    return float(sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def _tuple(keys) -> tuple:
    return keys if isinstance(keys, tuple) else (keys,)


def _check_summary_args(frame, by, metric, compare, pair_on, test) -> str:
    if not by:
        raise ValueError("summarize needs at least one grouping column in by=[...]")
    missing = [c for c in [*by, metric, pair_on] if c not in frame.columns]
    if missing:
        raise ValueError(f"columns {missing} not in the frame; available: {sorted(frame.columns)}")
    if test not in TESTS:
        raise ValueError(f"test={test!r}; valid: {list(TESTS)}")
    compare = by[-1] if compare is None else compare
    if compare not in by:
        raise ValueError(f"compare={compare!r} must be one of by={list(by)}")
    return compare


def _by_pair_key(data, by, metric, pair_on) -> dict[tuple, dict]:
    """group keys -> {pair key (seed): mean metric of that group's runs with that seed}."""
    means = data.groupby([*by, pair_on], dropna=False)[metric].mean()
    out: dict[tuple, dict] = {}
    for keys, value in means.items():
        out.setdefault(tuple(keys[:-1]), {})[keys[-1]] = float(value)
    return out


def _baseline_columns(out, paired, by, compare, strata, baseline, pick, alpha) -> pd.DataFrame:
    n_paired, diff, p = [], [], []
    levels = set(out[compare])
    if baseline is not None and baseline not in levels:
        raise ValueError(f"baseline={baseline!r} is not a level of {compare!r}; "
                         f"levels: {sorted(map(str, levels))}")
    for _, row in out.iterrows():
        key = tuple(row[c] for c in by)
        base_key = tuple(baseline if c == compare else row[c] for c in by)
        if baseline is None or row[compare] == baseline or base_key not in paired:
            n_paired.append(0), diff.append(math.nan), p.append(math.nan)
            continue
        res = paired_test(paired[key], paired[base_key], alpha=alpha)
        n_paired.append(res.n), diff.append(res.mean_diff), p.append(getattr(res, pick))
    out = out.assign(n_paired=n_paired, diff_vs_baseline=diff, p_vs_baseline=p)
    out["p_holm"] = holm(out["p_vs_baseline"].to_numpy(float))
    out["significant"] = (out["p_holm"] <= alpha).fillna(False).astype(bool)
    return out


def _not_worse(out, paired, by, strata, pick, alpha, higher_is_better) -> list[bool]:
    """Best mean per stratum, and every group its paired test cannot tell apart from it."""
    score = out["mean"] if higher_is_better else -out["mean"]
    best_rows = (score.groupby([out[c] for c in strata]).idxmax().to_dict() if strata
                 else {(): score.idxmax()})
    best_of = {(k if isinstance(k, tuple) else (k,)): tuple(out.loc[i, c] for c in by)
               for k, i in best_rows.items()}
    flags = []
    for _, row in out.iterrows():
        key, best_key = tuple(row[c] for c in by), best_of[tuple(row[c] for c in strata)]
        p = math.nan if key == best_key else getattr(
            paired_test(paired[key], paired[best_key], alpha=alpha), pick)
        flags.append(key == best_key or bool(np.isnan(p) or p > alpha))
    return flags
