"""A grid's ``seeds:`` plan: seeds added until each comparison with the baseline is decided.

``seeds: {min: 3, max: 10, effect: 3, baseline: grpo}`` replaces the grid's seed axis: every
cell runs seeds ``base.seed .. base.seed + min - 1``, then the sweep adds the next seed, round
by round, only to the cells whose comparison with the baseline is undecided, until ``max``
(the rule, its error control and why: :mod:`analysis.sequential`; the rounds:
:mod:`sweeps.sequential`). This module is the key's schema and parser.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from analysis.sequential import SPENDING, SeedPlan
from sweeps.keys import KeySpec
from trainer.config import ConfigError, RunConfig, unknown_key_error

POINTS = 100.0  # display points per metric unit: success 0.031 is 3.1 points, as tables print it

SEEDS_FIELDS: dict[str, KeySpec] = {
    "min": KeySpec("integer", 3, "Seeds every cell runs first (seeds base.seed, base.seed + 1, "
                   "...).", ">= 2"),
    "max": KeySpec("integer", 10, "Seeds a cell runs at most.", ">= min"),
    "effect": KeySpec("number", None, "Effect of interest in points (the metric x 100, as the "
                      "tables print success): a comparison whose interval lies inside "
                      "±effect is decided equivalent and gets no more seeds. Empty: only a "
                      "difference decides.", "> 0"),
    "baseline": KeySpec("string", "grpo", "The method every other cell is compared with (the "
                        "baseline cell with the cell's other grid values), paired by seed; its "
                        "cells get the seeds their comparisons need.", "a method of the grid"),
    "metric": KeySpec("string", "", "The logged metric the comparisons are on. Empty: the "
                      "held-out panel's success (`eval/eval_unseen/success`, else "
                      "`eval/eval/success`, else the first other `eval/<split>/success`)."),
    "alpha": KeySpec("number", 0.05, "Family-wise false-positive rate over every comparison "
                     "and every look (Bonferroni over the comparisons, alpha spending over the "
                     "looks).", "0 < alpha < 1"),
    "spending": KeySpec("string", "kim_demets", "How each comparison's alpha is spread over "
                        "its looks (analysis.sequential: `kim_demets` keeps most of it for the "
                        "last look, so the power at `max` stays near a fixed design's).",
                        ", ".join(SPENDING)),
}
SEEDS_KEYS = tuple(SEEDS_FIELDS)
SPLITS = ("eval_unseen", "eval")  # the held-out panels, in order of preference


@dataclass(frozen=True)
class SeedsSpec:
    """A study's ``seeds:`` (:data:`SEEDS_FIELDS`); ``effect`` in points."""

    min: int = 3
    max: int = 10
    effect: float | None = None
    baseline: str = "grpo"
    metric: str = ""
    alpha: float = 0.05
    spending: str = "kim_demets"

    @property
    def plan(self) -> SeedPlan:
        """The rule's plan, its effect in the metric's units."""
        effect = None if self.effect is None else self.effect / POINTS
        return SeedPlan(self.min, self.max, effect, self.alpha, self.spending)

    def record(self) -> str:
        """The plan as the parent run's tag records it (JSON, keys sorted)."""
        return json.dumps(asdict(self), sort_keys=True)


def parse_seeds(where: str, data: Any, base: RunConfig) -> SeedsSpec:
    """The ``seeds:`` mapping of a study file; one-line errors name the key, the value and
    the valid values."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with {', '.join(SEEDS_KEYS)}, got {data!r}")
    for key in data:
        if key not in SEEDS_KEYS:
            raise ConfigError(f"{where}: {unknown_key_error(str(key), SEEDS_KEYS)}")
    values = {k: data.get(k, SEEDS_FIELDS[k].default) for k in SEEDS_KEYS}
    for key in ("min", "max"):
        if not isinstance(values[key], int) or isinstance(values[key], bool):
            raise ConfigError(f"{where}.{key}: expected an integer, got {values[key]!r}")
    for key in ("effect", "alpha"):
        value = values[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise ConfigError(f"{where}.{key}: expected a number, got {value!r}")
    for key in ("baseline", "metric", "spending"):
        if not isinstance(values[key], str):
            raise ConfigError(f"{where}.{key}: expected a string, got {values[key]!r}")
    spec = SeedsSpec(**{**values, "effect": None if values["effect"] is None
                        else float(values["effect"]), "alpha": float(values["alpha"])})
    try:
        spec.plan  # noqa: B018 (validates min, max, effect, alpha, spending)
    except ValueError as exc:
        raise ConfigError(f"{where}.{str(exc).removeprefix('seeds.')}") from None
    return spec


def check_seeds(where: str, spec: SeedsSpec, grid: tuple[tuple[str, tuple], ...],
                base: RunConfig) -> None:
    """A plan needs its baseline among the grid's methods and gives the seeds itself."""
    axes = dict(grid)
    if "seed" in axes:
        raise ConfigError(f"{where}: grid.seed and seeds cannot be combined; seeds: {{min, max}} "
                          f"runs seeds base.seed ({base.seed}) to base.seed + max - 1")
    methods = [str(m) for m in axes.get("algo.method", (base.algo.method,))]
    if spec.baseline not in methods:
        raise ConfigError(f"{where}.baseline: {spec.baseline!r} is not a method of the grid; "
                          f"valid: {', '.join(methods)}")
    if len(methods) < 2:
        raise ConfigError(f"{where}: the grid has one method ({methods[0]}), nothing to compare "
                          f"with the baseline; add algo.method values to the grid")
