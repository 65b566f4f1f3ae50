"""Seeds added until a comparison is decided: the sequential rule a study's ``seeds:`` plan
runs, round by round. Pure numpy/scipy; the sweep (``sweeps.sequential``) acts on
:func:`plan_round`, the report states :func:`describe_rule`, and the calibration tests
simulate :func:`simulate_studies`: all three call the functions here.

**The rule.** Every cell runs ``min`` seeds. Each cell is compared with its baseline cell,
paired by seed, on the paired differences ``d`` of its ``n`` seeds: the interval
``mean(d) +- c_n s(d) / sqrt(n)`` (a *repeated confidence interval*, Jennison & Turnbull
1989) decides

* **different** when it excludes 0;
* **equivalent** when it lies inside ``(-effect, +effect)`` (the stated effect of interest;
  no such decision without one);
* else **undecided**: the cell gets one more seed next round (and its baseline, when it
  lacks that seed: pairs are by seed), until ``max`` seeds.

**Why it keeps its error rate over the repeated looks.** ``(mean(d) - mu) / (s(d)/sqrt(n))``
has, at every n and jointly over the looks, the same distribution whatever the true mean
``mu`` and SD (normal differences), so critical values ``c_min, ..., c_max`` chosen with
``P(|T_n| <= c_n for every n) = 1 - alpha_each`` make the intervals cover ``mu`` at every
look at once with probability ``1 - alpha_each``. A decision is wrong only if its interval
misses ``mu`` (a "different" with ``mu = 0``, an "equivalent" with ``|mu| >= effect``), so
stopping at any look, for any reason, keeps each comparison's error at ``alpha_each``.
Over the study's ``m`` comparisons ``alpha_each = alpha / m`` (Bonferroni: the comparisons
share their baseline's seeds, and Bonferroni needs no independence), so the family-wise
error rate is at most ``alpha``.

**Spending.** How ``alpha_each`` is spread over the looks at ``n = min..max`` is a
Lan-DeMets spending function of the information fraction ``t = n / max``:
``kim_demets`` (the default: the power family ``a t^8``, Kim & DeMets 1987), ``obrien_fleming``
(``2 - 2 Phi(z_{1-a/2} / sqrt(t))``), ``pocock`` (``a ln(1 + (e - 1) t)``), or
``bonferroni`` (``a / K`` at each of the K looks, Student t quantiles, no calibration: the
simple conservative one). Why the default keeps most of the alpha for the last look: with
2-9 degrees of freedom a t statistic needs a huge critical value to spend any alpha early
(O'Brien-Fleming's first look at n = 3 of 10 is |t| > 153), so alpha spent before ``max``
buys few early stops and costs power at ``max``; on the CPU reference's seed SD (the
calibration table of docs/results/compute_aware_studies.md) ``kim_demets`` keeps the power
at ``max`` about 0.02 below the fixed design's, O'Brien-Fleming about 0.06 and Pocock
0.25 below. No valid rule can beat the fixed design's power at the same ``max``: its two-sided
t-test is the uniformly most powerful unbiased test on ``max`` pairs. The rule saves runs
where a comparison is clear early: a large difference, or (with ``effect``) a clearly
small one. The first look's critical value is
the exact Student t quantile; the later ones are calibrated by simulating the joint t
statistics of normal differences (:data:`DRAWS` paths, a fixed seed, so the boundaries
are the same on every machine), each the quantile that spends exactly the function's
increment.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from analysis.power import comparison_alpha, paired_differences

SPENDING = ("kim_demets", "obrien_fleming", "pocock", "bonferroni")
KIM_DEMETS_RHO = 8.0  # the power family's exponent: most of the alpha kept for the last look
STATES = ("different", "equivalent", "undecided")
DRAWS = 400_000  # simulated paths that calibrate the boundaries
CALIBRATION_SEED = 20_260_101


@dataclass(frozen=True)
class SeedPlan:
    """A study's ``seeds:`` plan: ``min`` seeds for every cell, at most ``max``; the
    effect of interest in the metric's units (None: no equivalence decision); the
    family-wise ``alpha``; the spending function (:data:`SPENDING`)."""

    min: int = 3
    max: int = 10
    effect: float | None = None
    alpha: float = 0.05
    spending: str = "kim_demets"

    def __post_init__(self) -> None:
        if not (isinstance(self.min, int) and self.min >= 2):
            raise ValueError(f"seeds.min={self.min!r}; valid: an integer >= 2")
        if not (isinstance(self.max, int) and self.max >= self.min):
            raise ValueError(f"seeds.max={self.max!r}; valid: an integer >= seeds.min ({self.min})")
        if self.effect is not None and not (math.isfinite(self.effect) and self.effect > 0):
            raise ValueError(f"seeds.effect={self.effect!r}; valid: a number > 0, or none")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"seeds.alpha={self.alpha!r}; valid: a number strictly between 0 and 1")
        if self.spending not in SPENDING:
            raise ValueError(f"seeds.spending={self.spending!r}; valid: {', '.join(SPENDING)}")

    @property
    def looks(self) -> tuple[int, ...]:
        """The n of every look: min, min + 1, ..., max."""
        return tuple(range(self.min, self.max + 1))


@dataclass(frozen=True)
class Look:
    """One comparison at one look: n pairs, their mean difference, the repeated
    confidence interval and the decision (:data:`STATES`); ``final`` when no seed is added
    (decided, or undecided at ``max``)."""

    n: int
    mean: float
    low: float
    high: float
    state: str
    final: bool


@dataclass(frozen=True)
class Round:
    """What a round of the sweep does: per cell, how many of the plan's seeds it must
    have (``targets``: the first k of the seed list) and, per compared cell, its look."""

    targets: dict[str, int]
    looks: dict[str, Look]

    def settled(self, counts: Mapping[str, int]) -> bool:
        """True when no cell needs more seeds than ``counts`` (cell -> seeds it has)."""
        return all(counts.get(c, 0) >= k for c, k in self.targets.items())


# ---------------------------------------------------------------- boundaries


def spent(fraction: np.ndarray | float, alpha: float, spending: str) -> np.ndarray:
    """Cumulative alpha a Lan-DeMets spending function has spent at information
    ``fraction`` in (0, 1] (module doc); ``bonferroni`` is not a function of the fraction
    and has none."""
    t = np.asarray(fraction, dtype=float)
    if spending == "kim_demets":
        return alpha * t ** KIM_DEMETS_RHO
    if spending == "obrien_fleming":
        return 2.0 - 2.0 * sps.norm.cdf(sps.norm.ppf(1.0 - alpha / 2.0) / np.sqrt(t))
    if spending == "pocock":
        return alpha * np.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"spending={spending!r} has no spending function; valid: "
                     f"{', '.join(SPENDING[:-1])}")


@functools.lru_cache(maxsize=64)
def boundaries(n_min: int, n_max: int, alpha: float, spending: str = "kim_demets",
               draws: int = DRAWS) -> tuple[float, ...]:
    """Critical |t| values ``c_n`` for the looks n = n_min..n_max at two-sided level
    ``alpha`` over all looks (module doc), one per look."""
    if spending not in SPENDING:
        raise ValueError(f"spending={spending!r}; valid: {', '.join(SPENDING)}")
    looks = np.arange(n_min, n_max + 1)
    if spending == "bonferroni":
        return tuple(float(sps.t.ppf(1.0 - alpha / (2.0 * looks.size), n - 1)) for n in looks)
    target = spent(looks / n_max, alpha, spending)  # cumulative, per look
    crit = [float(sps.t.ppf(1.0 - target[0] / 2.0, n_min - 1))]  # the first look is exact
    if looks.size == 1:
        return tuple(crit)
    rng = np.random.default_rng(CALIBRATION_SEED)
    t_stats = _t_paths(rng.standard_normal((draws, n_max)), n_min)  # [draws, K]
    alive = np.abs(t_stats[:, 0]) <= crit[0]
    for k in range(1, looks.size):
        # Reject as many still-alive paths as the increment spends (at least none).
        quota = int(round(target[k] * draws)) - int((~alive).sum())
        tk = np.abs(t_stats[alive, k])
        if quota <= 0:
            c = math.inf
        elif quota >= tk.size:
            c = 0.0
        else:
            c = float(np.partition(tk, tk.size - quota - 1)[tk.size - quota - 1])
        crit.append(c)
        alive &= np.abs(t_stats[:, k]) <= c
    return tuple(crit)


def _t_paths(z: np.ndarray, n_min: int) -> np.ndarray:
    """One-sample t statistics of the first n values of each row, for n = n_min..n_cols.
    ``z``: [paths, n_max]; returns [paths, n_max - n_min + 1]."""
    n = np.arange(1, z.shape[1] + 1, dtype=float)
    s1 = np.cumsum(z, axis=1)  # [paths, n_max]
    s2 = np.cumsum(z * z, axis=1)
    mean = s1 / n
    var = (s2 - s1 * mean) / np.maximum(n - 1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / np.sqrt(np.maximum(var, 0.0) / n)
    return t[:, n_min - 1:]


# ---------------------------------------------------------------- the decision


def classify(low, high, effect: float | None):
    """The decision (:data:`STATES`) of repeated intervals [low, high] (arrays broadcast)."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    different = (low > 0) | (high < 0)
    equivalent = np.zeros_like(different) if effect is None else \
        (low > -effect) & (high < effect) & ~different
    state = np.where(different, "different", np.where(equivalent, "equivalent", "undecided"))
    return str(state) if state.ndim == 0 else state


def critical_value(plan: SeedPlan, n: int, comparisons: int) -> float:
    """The plan's critical |t| at a look with ``n`` pairs (``n`` in min..max) when the
    family has ``comparisons`` comparisons."""
    if not plan.min <= n <= plan.max:
        raise ValueError(f"n={n!r}; valid: {plan.min}..{plan.max} (the plan's looks)")
    level = comparison_alpha(plan.alpha, comparisons)
    return boundaries(plan.min, plan.max, level, plan.spending)[n - plan.min]


def look(diffs: Sequence[float], plan: SeedPlan, comparisons: int) -> Look:
    """The decision on one comparison's paired differences (module doc). Fewer than
    ``min`` pairs: undecided, not final; more than ``max``: the look at ``max`` pairs."""
    d = np.asarray(diffs, dtype=float)[: plan.max]
    n = int(d.size)
    mean = float(d.mean()) if n else math.nan
    if n < plan.min:
        return Look(n, mean, math.nan, math.nan, "undecided", False)
    half = critical_value(plan, n, comparisons) * float(d.std(ddof=1)) / math.sqrt(n)
    state = classify(mean - half, mean + half, plan.effect)
    return Look(n, mean, mean - half, mean + half, state, state != "undecided" or n >= plan.max)


def plan_round(per_seed: Mapping[str, Mapping[int, float]], baseline: Mapping[str, str],
               plan: SeedPlan, seeds: Sequence[int]) -> Round:
    """The next round of a study run under ``plan``.

    ``per_seed``: cell -> {seed: metric} of its finished runs; ``baseline``: compared cell
    -> its baseline cell (every cell of the study appears as a key or a value);
    ``seeds``: the plan's seed list in order (``max`` of them). A cell whose comparison is
    undecided with ``n`` pairs short of ``max`` gets target ``n + 1``, a decided one (or one
    at ``max``) keeps its ``n``; every cell at least ``min``; a baseline as many as its
    comparisons need (pairs are by seed)."""
    if len(seeds) < plan.max:
        raise ValueError(f"seeds={list(seeds)!r}; valid: a list of at least seeds.max "
                         f"({plan.max}) seeds")
    m = max(1, len(baseline))
    cells = list(dict.fromkeys([*baseline, *baseline.values()]))
    targets = dict.fromkeys(cells, plan.min)
    looks = {}
    for cell, base in baseline.items():
        first = {s: v for s, v in per_seed.get(cell, {}).items() if s in seeds[: plan.max]}
        result = look(paired_differences(first, per_seed.get(base, {})), plan, m)
        looks[cell] = result
        # an open look asks for one more pair; a final one keeps the pairs it has
        need = result.n + 1 if not result.final and result.n >= plan.min else result.n
        targets[cell] = max(targets[cell], need)
        targets[base] = max(targets[base], need)
    return Round(targets, looks)


@dataclass(frozen=True)
class Replay:
    """The rule replayed over a finished study's seeds: each comparison's last look, the
    seeds each cell needed and the runs in all (against ``full_runs``, every cell's seeds)."""

    looks: dict[str, Look]
    seeds: dict[str, int]
    runs: int
    full_runs: int


def replay(per_seed: Mapping[str, Mapping[int, float]], baseline: Mapping[str, str],
           plan: SeedPlan, seeds: Sequence[int]) -> Replay:
    """Run :func:`plan_round` round by round on a finished study, revealing to each cell
    only the first seeds its targets reach (a seed the study did not run stays missing):
    the runs the rule would have needed and the decisions it reaches."""
    seeds = list(seeds)
    have = dict.fromkeys([*baseline, *baseline.values()], 0)
    while True:
        shown = {c: {s: v for s, v in per_seed.get(c, {}).items() if s in seeds[:k]}
                 for c, k in have.items()}
        step = plan_round(shown, baseline, plan, seeds)
        if step.settled(have):
            runs = {c: len(v) for c, v in shown.items()}
            return Replay(step.looks, runs, sum(runs.values()),
                          sum(len(per_seed.get(c, {})) for c in have))
        have = {c: max(have[c], step.targets[c]) for c in have}


def describe_rule(plan: SeedPlan, comparisons: int, unit: str = "") -> str:
    """One sentence that states the rule, for the report and the parent run."""
    level = comparison_alpha(plan.alpha, max(1, comparisons))
    equiv = (f"inside ±{plan.effect:g}{unit} (equivalent)" if plan.effect is not None
             else "never equivalent (no effect of interest stated)")
    return (f"Seeds added until decided: every cell ran {plan.min} seeds, then one more a round "
            f"while its repeated 95%-family interval of the paired difference with its baseline "
            f"neither excluded 0 (different) nor lay {equiv}, up to {plan.max}; "
            f"{plan.spending.replace('_', '-')} alpha spending over the looks at level "
            f"{level:.3g} per comparison (α = {plan.alpha:g} Bonferroni over {max(1, comparisons)} "
            f"comparison{'s' if comparisons != 1 else ''}), so the family-wise error over all "
            f"looks is at most {plan.alpha:g}.")


# ---------------------------------------------------------------- simulation


@dataclass(frozen=True)
class Simulated:
    """Per simulated study: the decisions of each comparison (``[studies, m]`` of
    :data:`STATES`), the seeds each comparison's cell ran, and the runs of the study (every
    cell's seeds plus the baseline's, the largest of its comparisons')."""

    states: np.ndarray
    n: np.ndarray
    runs: np.ndarray


def simulate_studies(values: np.ndarray, plan: SeedPlan) -> Simulated:
    """Run the rule over simulated studies: ``values`` [studies, m + 1, max] holds per
    study the baseline's (index 0) and each compared cell's metric by seed. Vectorised over
    studies; the same :func:`classify` and :func:`critical_value` as :func:`look`."""
    studies, cells, n_max = values.shape
    if n_max < plan.max:
        raise ValueError(f"values has {n_max} seeds; the plan needs {plan.max}")
    m = cells - 1
    d = values[:, 1:, : plan.max] - values[:, :1, : plan.max]  # [S, m, max]
    s1, s2 = np.cumsum(d, axis=2), np.cumsum(d * d, axis=2)
    states = np.full((studies, m), "undecided", dtype=object)
    n = np.full((studies, m), plan.max)
    open_ = np.ones((studies, m), dtype=bool)
    for k in plan.looks:
        mean = s1[:, :, k - 1] / k
        sd = np.sqrt(np.maximum(s2[:, :, k - 1] - s1[:, :, k - 1] * mean, 0.0) / (k - 1))
        half = critical_value(plan, k, m) * sd / math.sqrt(k)
        state = classify(mean - half, mean + half, plan.effect)
        stop = open_ & (state != "undecided")
        states[stop], n[stop] = state[stop], k
        open_ &= ~stop
    return Simulated(states, n, n.sum(axis=1) + n.max(axis=1))


def fixed_design(values: np.ndarray, alpha: float) -> np.ndarray:
    """The report's fixed design on the same simulated studies (all ``max`` seeds, paired t,
    Holm over the m comparisons): per study and comparison, rejected or not
    ([studies, m] bools)."""
    d = values[:, 1:, :] - values[:, :1, :]  # [S, m, n]
    p = sps.ttest_1samp(d, 0.0, axis=2).pvalue  # [S, m]
    order = np.sort(p, axis=1)
    m = p.shape[1]
    # Holm: reject the k smallest while p_(j) <= alpha / (m - j + 1) for every j <= k.
    passes = np.cumprod(order <= alpha / (m - np.arange(m)), axis=1).astype(bool)
    k = passes.sum(axis=1)  # [S]
    threshold = np.where(k > 0, order[np.arange(p.shape[0]), np.maximum(k - 1, 0)], -1.0)
    return p <= threshold[:, None]
