"""Power of the report's paired comparisons: seeds needed before launch, the minimum
detectable effect after. Pure numpy/scipy.

The report compares each method with the study's baseline by a two-sided paired t-test over
seeds (:func:`analysis.stats.paired_test`), Holm-corrected over the table's comparisons. For
planning, a comparison is taken at Holm's first (strictest) level ``alpha / m``
(:func:`comparison_alpha`): a difference planned for that level is found whatever the other
comparisons show, so the plan never relies on another comparison being rejected first.

* Power of the paired t-test with ``n`` seeds against a true mean difference ``effect``
  when the paired differences have SD ``sd`` (exact under normal differences, not the normal
  approximation): with ``df = n - 1``, the critical value ``c = t_{df, 1 - a/2}`` and the
  noncentrality ``lambda = effect sqrt(n) / sd``,
  ``power = P(T' > c) + P(T' < -c)``, T' noncentral t(df, lambda)
  (:func:`paired_power`). E.g. effect = sd, n = 10, a = 0.05: 0.803.
* Seeds needed: the least ``n >= MIN_SEEDS`` with power >= ``power`` (:func:`seeds_needed`).
* Minimum detectable effect at ``n``: the ``effect`` at which the power is ``power``
  (:func:`min_detectable_effect`), found by root finding on the exact power.
* The SD comes from a pilot's paired differences; with ``k`` pairs its one-sided upper
  confidence limit is ``s sqrt((k - 1) / chi2_{k-1, 1 - confidence})`` (:func:`sd_upper`).
  Planning with the limit at 80% gives the planned power with probability about 0.8 or more
  (Browne, 1995, "On the use of a pilot sample for sample size determination").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

POWER = 0.8
SD_CONFIDENCE = 0.8  # the one-sided confidence of the pilot SD's upper limit
MIN_SEEDS = 3  # analysis.stats.MIN_PAIRED: the report tests nothing below it
MAX_SEEDS = 10_000
POWER_COLUMNS = ("cell", "baseline", "n_paired", "mean_diff", "sd", "sd_upper", "alpha_each",
                 "seeds_needed", "seeds_needed_upper", "mde", "power_at_n")


def comparison_alpha(alpha: float, comparisons: int) -> float:
    """The level a single comparison is planned at: Holm's first step, ``alpha / m``."""
    _check_level("alpha", alpha)
    if comparisons < 1:
        raise ValueError(f"comparisons={comparisons!r}; valid: an integer >= 1")
    return alpha / comparisons


def paired_power(effect: float, sd: float, n: int | np.ndarray, alpha: float) -> float | np.ndarray:
    """Power of the two-sided paired t-test at level ``alpha`` with ``n`` pairs (module doc).
    ``n`` may be an array; n < 2 has no test (power NaN); sd = 0 gives power 1 for a nonzero
    effect."""
    _check_level("alpha", alpha)
    n_arr = np.asarray(n, dtype=float)
    df = n_arr - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        crit = sps.t.ppf(1.0 - alpha / 2.0, np.where(df >= 1, df, np.nan))
        if sd <= 0:
            out = np.where(df >= 1, 1.0 if effect != 0 else alpha, np.nan)
        else:
            nc = abs(effect) * np.sqrt(n_arr) / sd
            # P(T' < -c) as P(T'(-lambda) > c): scipy's nct.cdf returns NaN far in the tail
            out = sps.nct.sf(crit, df, nc) + sps.nct.sf(crit, df, -nc)
    return float(out) if np.ndim(out) == 0 else out


def seeds_needed(effect: float, sd: float, alpha: float, power: float = POWER,
                 max_n: int = MAX_SEEDS) -> int | None:
    """The least ``n >= MIN_SEEDS`` pairs whose paired t-test has ``power`` against
    ``effect``; None when even ``max_n`` pairs do not (or the effect is 0)."""
    _check_level("power", power)
    if effect == 0 or not math.isfinite(sd):
        return None
    if sd <= 0:
        return MIN_SEEDS
    lo, hi = MIN_SEEDS, MIN_SEEDS
    while paired_power(effect, sd, hi, alpha) < power:  # doubling, then bisection
        if hi >= max_n:
            return None
        lo, hi = hi + 1, min(2 * hi, max_n)
    while lo < hi:
        mid = (lo + hi) // 2
        if paired_power(effect, sd, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


def min_detectable_effect(sd: float, n: int, alpha: float, power: float = POWER) -> float:
    """The smallest true difference the paired t-test with ``n`` pairs finds with ``power``
    (same units as ``sd``); NaN for n < 2 or an unknown SD."""
    _check_level("power", power)
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd <= 0:
        return 0.0
    if power <= alpha:
        return 0.0

    def shortfall(effect: float) -> float:
        return paired_power(effect, sd, n, alpha) - power

    hi = sd
    while shortfall(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(shortfall, 0.0, hi, xtol=1e-10 * sd))


def sd_upper(sd: float, n: int, confidence: float = SD_CONFIDENCE) -> float:
    """One-sided upper ``confidence`` limit of an SD estimated from ``n`` values (chi-square,
    ``n - 1`` degrees of freedom); NaN for n < 2."""
    _check_level("confidence", confidence)
    if n < 2 or not math.isfinite(sd):
        return math.nan
    return float(sd * math.sqrt((n - 1) / sps.chi2.ppf(1.0 - confidence, n - 1)))


def paired_differences(a: Mapping, b: Mapping) -> np.ndarray:
    """``a[seed] - b[seed]`` over the seeds both have with finite values, in seed order."""
    keys = sorted(k for k in set(a) & set(b) if np.isfinite(a[k]) and np.isfinite(b[k]))
    return np.array([a[k] - b[k] for k in keys], dtype=float)


def comparison_power(per_seed: Mapping[str, Mapping], baseline: Mapping[str, str], *,
                     effect: float | None, alpha: float = 0.05, power: float = POWER,
                     confidence: float = SD_CONFIDENCE) -> pd.DataFrame:
    """One row per comparison (:data:`POWER_COLUMNS`): ``per_seed`` maps a cell to its
    values by seed; ``baseline`` maps each compared cell to its baseline cell (the family
    of m comparisons; each is planned at ``alpha / m``). From the pilot's paired
    differences: their mean and SD, the SD's upper limit, the seeds needed to find
    ``effect`` at ``power`` with the SD and with its upper limit, the minimum detectable
    effect at the pilot's n and the power at that n against ``effect`` (those three None /
    NaN without an ``effect``)."""
    level = comparison_alpha(alpha, max(1, len(baseline)))
    rows = []
    for cell, base in baseline.items():
        d = paired_differences(per_seed.get(cell, {}), per_seed.get(base, {}))
        n = int(d.size)
        sd = float(d.std(ddof=1)) if n > 1 else math.nan
        upper = sd_upper(sd, n, confidence)
        plan = n > 1 and effect is not None
        rows.append((cell, base, n, float(d.mean()) if n else math.nan, sd, upper, level,
                     seeds_needed(effect, sd, level, power) if plan else None,
                     seeds_needed(effect, upper, level, power) if plan else None,
                     min_detectable_effect(sd, n, level, power),
                     paired_power(effect, sd, n, level) if plan and sd > 0 else math.nan))
    return pd.DataFrame(rows, columns=list(POWER_COLUMNS))


def mde_of(diffs: Sequence[float], comparisons: int, alpha: float = 0.05,
           power: float = POWER) -> float:
    """The minimum detectable effect of one of ``comparisons`` Holm-corrected paired tests,
    at the n and SD of its own paired differences ``diffs`` (what a "not shown different"
    could have shown)."""
    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return math.nan
    return min_detectable_effect(float(d.std(ddof=1)), int(d.size),
                                 comparison_alpha(alpha, max(1, comparisons)), power)


def _check_level(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name}={value!r}; valid: a number strictly between 0 and 1")
