"""Statistics over seeds and tasks: pure numpy/scipy, no plotting, no MLflow.

Conventions (Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice", the
rliable library):

* Per-cell results are mean and sample std (ddof=1) over seeds (runs of one seed are
  averaged first, so ``n`` is always the number of seeds) with a 95% CI of the mean. The
  default is the **Student t interval** ``mean +- t_{n-1} s / sqrt(n)``, which keeps its
  coverage at n = 2-3 seeds; a percentile bootstrap over 2-3 seeds collapses to [min, max]
  and is available only on request (``ci="bootstrap"``). With a single seed std and the CI
  are NaN. :data:`CI_METHODS` names each interval for captions.
* Aggregates over tasks/datasets use the **IQM** (interquartile mean, ``scipy.stats.
  trim_mean(x, 0.25)`` over all run x task scores) with a **stratified** bootstrap: runs are
  resampled within each task independently.
* Comparisons with a baseline are **paired by seed** (seeds present on one side only are
  dropped and ``n_paired`` is reported): a two-sided paired t-test, and a two-sided exact
  Wilcoxon signed-rank test when ``n`` is large enough for it to reach ``alpha``
  (2 / 2**n <= alpha, i.e. n >= 6 at 0.05). p-values are Holm-Bonferroni corrected.
  No test is run with fewer than :data:`MIN_PAIRED` (3) paired seeds. Differences with zero
  variance (every seed gains exactly the same) have no t statistic; they get the exact
  sign-flip permutation p-value ``2 / 2**n`` (and p = 1 when all are 0), without warnings.
* "Not worse than the best" uses the same corrected test: within each stratum every group
  is compared with the best mean among the groups with at least MIN_PAIRED seeds (Holm over
  those comparisons); a group that cannot be tested (fewer than MIN_PAIRED paired seeds) is
  **not** counted as not worse and never defines the best, however high its mean (a 2-seed
  mean is not evidence of a best). A stratum without such a group has no best.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.power import mde_of, paired_differences

TESTS = ("t", "wilcoxon")
MIN_PAIRED = 3
FEW_SEEDS = 5  # below this many seeds a report says so
CI_METHODS = {"t": "Student t interval over seeds",
              "bootstrap": "percentile bootstrap over seeds"}
SUMMARY_COLUMNS = ("n", "mean", "std", "ci_low", "ci_high", "n_paired", "diff_vs_baseline",
                   "p_vs_baseline", "p_holm", "significant", "mde_vs_baseline", "p_vs_best",
                   "not_worse_than_best")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1) of the finite values; std is NaN for fewer than 2."""
    x = finite(values)
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
    x = finite(values)
    check_bootstrap(n_boot, confidence)
    if x.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)  # [n_boot]
    return percentile_interval(means, confidence)


def t_ci(values: Sequence[float], *, confidence: float = 0.95) -> tuple[float, float]:
    """Student t CI of the mean over the finite ``values``: mean +- t_{n-1, (1+c)/2} s/sqrt(n).

    Exact under normal seed-to-seed noise and, unlike a percentile bootstrap, wide at small
    n (n = 2: +- 12.7 s / sqrt 2). ``n < 2`` gives ``(nan, nan)``; zero spread gives a
    zero-width interval at the mean.
    """
    check_bootstrap(1, confidence)
    x = finite(values)
    if x.size < 2:
        return math.nan, math.nan
    mean, half = float(x.mean()), 0.0
    std = float(x.std(ddof=1))
    if std > 0:
        half = float(sps.t.ppf((1.0 + confidence) / 2.0, x.size - 1)) * std / math.sqrt(x.size)
    return mean - half, mean + half


def mean_ci(values: Sequence[float], method: str = "t", *, confidence: float = 0.95,
            n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The CI of the mean named by ``method`` (a key of :data:`CI_METHODS`)."""
    intervals = {
        "t": lambda: t_ci(values, confidence=confidence),
        "bootstrap": lambda: bootstrap_ci(values, n_boot=n_boot, confidence=confidence, seed=seed),
    }
    if method not in intervals:
        raise ValueError(f"ci={method!r}; valid: {list(CI_METHODS)}")
    return intervals[method]()


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: mean of the middle 50% after dropping ``floor(n/4)`` at each end.

    Same definition as rliable (``scipy.stats.trim_mean(x, 0.25)`` on the flattened scores),
    so IQM([1..8]) = mean(3, 4, 5, 6) = 4.5.
    """
    x = finite(np.ravel(np.asarray(values, dtype=float)))
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
    check_bootstrap(n_boot, confidence)
    tasks = [finite(t) for t in scores_per_task]
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
    return (point, *percentile_interval(boot, confidence))


@dataclass(frozen=True)
class PairedTest:
    """Result of a paired comparison ``a - b`` over the seeds both sides have."""

    n: int
    mean_diff: float
    p_t: float
    p_wilcoxon: float


def paired_test(a: dict, b: dict, *, alpha: float = 0.05,
                min_n: int = MIN_PAIRED) -> PairedTest:
    """Two-sided paired t-test and Wilcoxon signed-rank test of ``a[seed] - b[seed]``.

    ``a`` and ``b`` map a pairing key (the seed) to a value; keys present on one side only,
    and pairs with a NaN, are dropped. Both p-values are NaN with fewer than ``min_n``
    pairs (default MIN_PAIRED = 3: two seeds never earn a significance marker). When all
    differences are equal the t statistic does not exist: p = 1 if they are 0, else the
    exact sign-flip permutation p-value 2 / 2**n (only "all +" and "all -" are as extreme).
    Wilcoxon (exact) is reported when 2 / 2**n <= alpha, the smallest n at which it could
    reject, else NaN; all-zero differences give p = 1.
    """
    keys = sorted(k for k in set(a) & set(b)
                  if np.isfinite(a[k]) and np.isfinite(b[k]))
    d = np.array([a[k] - b[k] for k in keys], dtype=float)
    n = d.size
    mean_diff = float(d.mean()) if n else math.nan
    if n < max(2, min_n):
        return PairedTest(n, mean_diff, math.nan, math.nan)
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
              baseline: object | Mapping | None = None, compare: str | None = None,
              pair_on: str = "seed", test: str = "t", alpha: float = 0.05,
              higher_is_better: bool = True, ci: str = "t", n_boot: int = 2000,
              seed: int = 0) -> pd.DataFrame:
    """One row per group of ``by``: n seeds, mean, std, CI and tests against a baseline.

    Runs of one group that share a ``pair_on`` value (a re-run of a seed) are averaged
    first, so ``n`` is the number of distinct seeds and the statistics are over seeds.
    ``compare`` (default ``by[-1]``, typically ``"method"``) is the column whose levels
    compete; the other ``by`` columns form strata (e.g. env), and comparisons happen within
    a stratum. ``baseline`` is a level of ``compare`` (e.g. ``"grpo"``) that every other
    level is tested against, or a mapping ``{level: its baseline level}`` (a swept baseline:
    each level is compared with the baseline run at the same sweep values; levels absent
    from the mapping are not tested). Tests are paired on ``pair_on`` (``test`` = ``"t"``
    or ``"wilcoxon"`` chooses the p-value) and need MIN_PAIRED paired seeds. ``p_holm``
    corrects all baseline comparisons of the table as one family; ``significant`` = p_holm
    <= alpha; ``mde_vs_baseline`` is the minimum detectable effect of a tested comparison
    (:func:`analysis.power.mde_of`: power 0.8 at Holm's first step over the family, at its
    n and SD of paired differences), what a comparison not shown different could have
    shown. ``p_vs_best`` is the Holm-corrected p-value (within the stratum) of the test
    against the stratum's best mean among groups with MIN_PAIRED or more seeds;
    ``not_worse_than_best`` marks that best and every group with ``p_vs_best > alpha`` (a
    group that cannot be tested is not marked and is never the best). ``ci`` names
    the interval (:data:`CI_METHODS`). Rows with a NaN metric are dropped.
    """
    compare = _check_summary_args(frame, by, metric, compare, pair_on, test)
    if ci not in CI_METHODS:
        raise ValueError(f"ci={ci!r}; valid: {list(CI_METHODS)}")
    data = frame.dropna(subset=[metric])
    strata = [c for c in by if c != compare]
    paired = _by_pair_key(data, by, metric, pair_on)
    rows = []
    for key, per_seed in paired.items():
        values = np.array(list(per_seed.values()), dtype=float)
        mean, std = mean_std(values)
        low, high = mean_ci(values, ci, n_boot=n_boot, seed=seed)
        rows.append({**dict(zip(by, key)), "n": len(values), "mean": mean,
                     "std": std, "ci_low": low, "ci_high": high})
    out = pd.DataFrame(rows, columns=[*by, "n", "mean", "std", "ci_low", "ci_high"])
    out = out.sort_values(list(by), ignore_index=True) if len(out) else out
    pick = "p_t" if test == "t" else "p_wilcoxon"
    out = _baseline_columns(out, paired, by, compare, baseline, pick, alpha)
    best = _vs_best(out, paired, by, strata, pick, alpha, higher_is_better)
    out["p_vs_best"], out["not_worse_than_best"] = best
    return out[[*by, *SUMMARY_COLUMNS]]


# ---------------------------------------------------------------- interval helpers


def finite(values) -> np.ndarray:
    """The finite entries of ``values``, flattened to a float array."""
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def check_bootstrap(n_boot: int, confidence: float) -> None:
    """Raise ValueError unless ``n_boot`` >= 1 and 0 < ``confidence`` < 1."""
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be a positive integer")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")


def percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` interval of bootstrap ``samples`` (their quantiles)."""
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


# ---------------------------------------------------------------- helpers


def _t_p(d: np.ndarray) -> float:
    if d.size < 2:
        return math.nan
    scale = max(1.0, float(np.abs(d).max()))
    if float(d.std()) <= 1e-12 * scale:  # constant up to rounding: no t statistic
        return 1.0 if float(np.abs(d).max()) <= 1e-12 else min(1.0, 2.0 / 2.0 ** d.size)
    return float(sps.ttest_1samp(d, 0.0).pvalue)


def _wilcoxon_p(d: np.ndarray, alpha: float) -> float:
    if d.size == 0 or 2.0 / 2.0 ** d.size > alpha:
        return math.nan
    if np.all(d == 0):
        return 1.0
    if np.all(d == d[0]):  # signed ranks are then all ties; the exact value is 2 / 2**n
        return min(1.0, 2.0 / 2.0 ** d.size)
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
    means = data.groupby([*by, pair_on], dropna=False, sort=True)[metric].mean()
    out: dict[tuple, dict] = {}
    for keys, value in means.items():
        out.setdefault(tuple(keys[:-1]), {})[keys[-1]] = float(value)
    return out


def _baseline_of(baseline, levels: set) -> Callable[[object], object | None]:
    """level -> the level it is compared with (None: not tested); validates ``baseline``."""
    if baseline is None:
        return lambda level: None
    if isinstance(baseline, Mapping):
        unknown = sorted(map(str, {b for b in baseline.values() if b not in levels}))
        if unknown:
            raise ValueError(f"baseline levels {unknown} are not levels; levels: "
                             f"{sorted(map(str, levels))}")
        return lambda level: baseline.get(level)
    if baseline not in levels:
        raise ValueError(f"baseline={baseline!r} is not a level; "
                         f"levels: {sorted(map(str, levels))}")
    return lambda level: baseline


def _baseline_columns(out, paired, by, compare, baseline, pick, alpha) -> pd.DataFrame:
    n_paired, diff, p, diffs = [], [], [], []
    base_of = _baseline_of(baseline, set(out[compare]))
    for _, row in out.iterrows():
        key = tuple(row[c] for c in by)
        base = base_of(row[compare])
        base_key = tuple(base if c == compare else row[c] for c in by)
        if base is None or row[compare] == base or base_key not in paired:
            n_paired.append(0), diff.append(math.nan), p.append(math.nan), diffs.append(())
            continue
        res = paired_test(paired[key], paired[base_key], alpha=alpha)
        n_paired.append(res.n), diff.append(res.mean_diff), p.append(getattr(res, pick))
        diffs.append(paired_differences(paired[key], paired[base_key]))
    out = out.assign(n_paired=n_paired, diff_vs_baseline=diff, p_vs_baseline=p)
    out["p_holm"] = holm(out["p_vs_baseline"].to_numpy(float))
    out["significant"] = (out["p_holm"] <= alpha).fillna(False).astype(bool)
    family = int(np.isfinite(out["p_vs_baseline"].to_numpy(float)).sum())
    out["mde_vs_baseline"] = [mde_of(d, family, alpha) if math.isfinite(q) else math.nan
                              for d, q in zip(diffs, p)]
    return out


def _vs_best(out, paired, by, strata, pick, alpha, higher_is_better):
    """Holm-corrected p against the stratum's best mean, and the not-worse flags."""
    p_best = np.full(len(out), math.nan)
    flags = np.zeros(len(out), dtype=bool)
    if out.empty:
        return p_best, flags
    score = out["mean"] if higher_is_better else -out["mean"]
    groups = out.groupby([out[c] for c in strata], sort=False).groups if strata \
        else {(): out.index}
    testable = out["n"] >= MIN_PAIRED
    for index in groups.values():
        idx = list(index)
        ranked = [i for i in idx if testable.loc[i] and math.isfinite(score.loc[i])]
        if not ranked:  # no group can be tested: none is called best
            continue
        best = score.loc[ranked].idxmax()
        best_key = tuple(out.loc[best, c] for c in by)
        raw = [math.nan if i == best else getattr(paired_test(
            paired[tuple(out.loc[i, c] for c in by)], paired[best_key], alpha=alpha), pick)
            for i in idx]
        adjusted = holm(raw)
        for i, p in zip(idx, adjusted):
            pos = out.index.get_loc(i)
            p_best[pos] = p
            top = bool(testable.loc[i]) and score.loc[i] == score.loc[best]
            flags[pos] = bool(i == best or top or (math.isfinite(p) and p > alpha))
    return p_best, flags


def per_cell(frame: pd.DataFrame, by: Sequence[str], columns: Sequence[str], *,
             seed: str = "seed", ci: str = "t") -> pd.DataFrame:
    """Long frame ``by..., column, n, mean, std, ci_low, ci_high``: for every group of
    ``by`` and every value column, the statistics over seeds (runs of one seed averaged
    first; NaN values dropped; groups without a finite value left out)."""
    missing = [c for c in [*by, *columns, seed] if c not in frame.columns]
    if missing:
        raise ValueError(f"columns {missing} not in the frame; available: {sorted(frame.columns)}")
    per_seed = frame.groupby([*by, seed], dropna=False, sort=True)[list(columns)].mean()
    rows = []
    for keys, part in per_seed.groupby(level=list(range(len(by))), sort=True):
        for column in columns:
            x = finite(part[column].to_numpy(float))
            if x.size == 0:
                continue
            mean, std = mean_std(x)
            low, high = mean_ci(x, ci)
            rows.append((*_tuple(keys), column, int(x.size), mean, std, low, high))
    return pd.DataFrame(rows, columns=[*by, "column", "n", "mean", "std", "ci_low", "ci_high"])
