"""Sensitivity studies: the final metric of each cell against the params a study varied.

A study varies a method's params either on a grid (``grid:`` axes) or through an Optuna
search (``search:``, every trial a new point). Reports treat them as researchers expect:

* **one axis** (a grid over beta_opd, say): the metric against the param with intervals;
* **two axes on a full grid**: a heatmap of the cell means;
* **anything else** (a search, or an incomplete grid): per-param slices, a contour per pair
  of params, the best cells with their intervals over seeds and the param importances
  computed by Optuna's own fANOVA evaluator on the cell means.

The params of a method are the numeric config params that differ between its cells
(:func:`reports.prepared.add_variants` names them in ``variant_params``); the OPD params
(beta_opd, lambda_opd, suffix_weight) are dropped for a method whose resolved
``algo.lambda_opd`` is 0 in every run (GRPO and other OPD-free methods do not use them), so
no method is plotted against a param it ignores. Pure pandas/numpy (Optuna only for the
importances).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.diagnostics import Skipped
from analysis.pruning import without_pruned
from analysis.stats import per_cell

OPD_PARAMS = ("algo.beta_opd", "algo.lambda_opd", "algo.suffix_weight")
KINDS = ("curve", "heatmap", "search")
CELL_COLUMNS = ("env_key", "env_label", "backbone", "method", "variant")


@dataclass(frozen=True)
class Sensitivity:
    """One method's sensitivity study: its params, the kind of layout (KINDS) and the cell
    frame ``env_key, env_label, backbone, method, variant, <params>, n, mean, std, ci_low,
    ci_high`` (one row per cell, statistics over seeds)."""

    method: str
    params: tuple[str, ...]
    kind: str
    cells: pd.DataFrame


def swept_params(runs: pd.DataFrame, method: str) -> list[str]:
    """Numeric params that vary among ``method``'s cells and that the method uses."""
    part = runs[runs["method"] == method]
    names = list(dict.fromkeys(p for pairs in part["variant_params"] for p, _ in pairs))
    numeric = [p for p in names if pd.api.types.is_numeric_dtype(part[p])
               and not pd.api.types.is_bool_dtype(part[p])]
    if "algo.lambda_opd" in part.columns and (part["algo.lambda_opd"].fillna(0) == 0).all():
        numeric = [p for p in numeric if p not in OPD_PARAMS]
    return numeric


def sensitivities(runs: pd.DataFrame, metric: str, *, ci: str = "t",
                  search: bool = False) -> list[Sensitivity] | Skipped:
    """Every method of ``runs`` (the prepared run frame) that varies a param it uses.

    ``metric`` is the per-run column (the report uses ``final_success``); ``search`` says
    the study is an Optuna search (its points are never a grid). The runs of a pruned search
    trial's cell are left out (:func:`analysis.pruning.without_pruned`): a pruned trial never
    counts as a complete cell. Skipped, with the reason, when no method varies a param or the
    metric is missing.
    """
    name = "sensitivity"
    runs = without_pruned(runs)
    if metric not in runs.columns or runs[metric].isna().all():
        return Skipped(name, f"runs have no {metric!r} values (no evaluation metric logged)")
    if "variant_params" not in runs.columns:
        return Skipped(name, "runs are not prepared (reports.prepared.prepare_runs)")
    out = []
    for method in runs["method"].drop_duplicates():
        params = swept_params(runs, method)
        if not params:
            continue
        part = runs[(runs["method"] == method)].dropna(subset=[metric])
        keys = [c for c in CELL_COLUMNS if c in part.columns]
        cells = per_cell(part, [*keys, *params], [metric], ci=ci).drop(columns="column")
        out.append(Sensitivity(method, tuple(params), _kind(cells, params, search), cells))
    if not out:
        return Skipped(name, "no method varies a numeric param it uses (OPD params of a "
                             "method with lambda_opd = 0 do not count)")
    return out


def _kind(cells: pd.DataFrame, params: Sequence[str], search: bool) -> str:
    if search or len(params) > 2:
        return "search"
    if len(params) == 1:
        return "curve"
    grid = cells.groupby(["env_key", "backbone"])[list(params)].nunique().prod(axis=1)
    size = cells.groupby(["env_key", "backbone"]).size()
    return "heatmap" if (grid == size).all() else "search"


def best_cells(s: Sensitivity, k: int = 5, higher_is_better: bool = True) -> pd.DataFrame:
    """The ``k`` best cells per (env, backbone) by mean over seeds, best first."""
    ordered = s.cells.sort_values("mean", ascending=not higher_is_better, kind="stable")
    return ordered.groupby(["env_key", "backbone"], sort=True).head(k).reset_index(drop=True)


def importances(s: Sensitivity, *, higher_is_better: bool = True,
                seed: int = 0) -> pd.DataFrame | Skipped:
    """Param importances per (env, backbone) by Optuna's fANOVA evaluator (seeded) on the
    cell means (one Optuna trial per cell). Columns: env_key, backbone, param, importance.
    Skipped with fewer than 3 cells or a single param, and where every cell scored the same
    (importances are shares of a variance that is zero: fANOVA raises "zero total variance"),
    with a reason that says so."""
    name = f"importance[{s.method}]"
    if len(s.params) < 2:
        return Skipped(name, f"{s.method} varies one param ({s.params[0]}); nothing to rank")
    # deferred: Optuna is heavy and optional (a GPU image may lack it); only this needs it
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows, ties = [], []
    for (env, backbone), part in s.cells.groupby(["env_key", "backbone"], sort=True):
        part = part.dropna(subset=["mean"])
        if len(part) < 3:
            continue
        if np.ptp(part["mean"].to_numpy(float)) == 0:
            ties.append(f"all {len(part)} cells of {env} score {part['mean'].iloc[0]:.4g}")
            continue
        dists = {p: _distribution(part[p], FloatDistribution) for p in s.params}
        study = optuna.create_study(direction="maximize" if higher_is_better else "minimize")
        for _, row in part.iterrows():
            study.add_trial(create_trial(params={p: float(row[p]) for p in s.params},
                                         distributions=dists, value=float(row["mean"])))
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
        try:
            result = optuna.importance.get_param_importances(study, evaluator=evaluator)
        except RuntimeError as exc:  # every tree of the forest fitted a constant
            if "zero total variance" not in str(exc):
                raise
            ties.append(f"the {len(part)} cells of {env} leave fANOVA no variance")
            continue
        rows += [(env, backbone, p, float(v)) for p, v in result.items()]
    if not rows:
        if ties:
            return Skipped(name, f"{'; '.join(ties)} (the trials tie): param importances are "
                                 "undefined without variance between cells")
        return Skipped(name, "fewer than 3 cells with a value per env and backbone")
    return pd.DataFrame(rows, columns=["env_key", "backbone", "param", "importance"])


def _distribution(values: pd.Series, cls):
    low, high = float(values.min()), float(values.max())
    if low == high:
        high = low + 1.0
    return cls(low, high, log=bool(low > 0 and high / low >= 10.0))
