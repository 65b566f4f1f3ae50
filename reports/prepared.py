"""The run frame as the paper tables see it: rows (cells) and columns (table metrics).

:func:`prepare_runs` is what every layout, figure and diagnostic of a report shares, so rows
read the same everywhere:

* **A row is a configuration.** :func:`add_variants` gives each run its ``variant``, one
  cell: the method plus the values of every config param that differs between the
  method's cells within an (env, backbone) (``"seed (β=2.39, λ=0.0196)"``,
  ``"seed (refresh_every=0)"``); runs are grouped by their ``cell_id`` (the hash of the whole
  resolved config except the seed), so distinct configs are never pooled.
* **A column is a table metric** (:class:`Metric`, key ``<env key>.<role or dataset>``):
  :func:`with_table_metrics` adds ``env_key`` (:func:`reports.envs.env_key`, the env name plus
  its level), ``env_label`` and one column per metric the runs' envs logged (the env registry
  :mod:`reports.envs` turns roles into columns: "ALFWorld Succ.", "WebShop Score", one column
  per QA dataset and their average), and :data:`FINAL_SUCCESS`, each run's own success.

No statistics here: per run, a QA env's average is the mean over its datasets; everything
over seeds is :mod:`analysis`'s.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.pruning import PRUNED_TAG
from reports.envs import (
    KIND_ROLES,
    LEVEL_PARAM,
    ROLE_LABELS,
    env_info,
    env_key,
    env_sort_key,
    eval_split,
)
from reports.tables import Column

PARAM_SYMBOLS = {"algo.suffix_weight": "α", "algo.beta_opd": "β", "algo.lambda_opd": "λ",
                 "writer.kind": "writer"}
# Loader columns that identify a run rather than configure it, and config prefixes that
# never define a cell (trainer.tracking.CELL_EXCLUDE).
IDENTITY_COLUMNS = ("run_id", "status", "experiment_id", "study", "cell_id", "method", "env", "backbone", "seed",
                    "algo.method", "env.name", "model.backbone", "method_writer", PRUNED_TAG)
NON_CELL_PREFIXES = ("tracking.", "output.", "stages.warm_start.cache")
FINAL_SUCCESS = "final_success"
DERIVED_COLUMNS = ("env_key", "env_label", "variant", "variant_params", FINAL_SUCCESS)


@dataclass(frozen=True)
class Metric:
    """A table metric: ``key`` (also the reported-CSV header), the env key whose runs carry
    it, the run-frame ``source`` column(s) (several are averaged per run), its header group
    (the env's display name) and label, and its ``role``."""

    key: str
    env: str
    source: tuple[str, ...]
    group: str
    label: str
    role: str

    def column(self) -> Column:
        return Column(self.key, self.group, self.label)


def env_metrics(key: str, info, columns) -> list[Metric]:
    """The table metrics of one env key, from the registry and the columns logged."""
    # the level suffix is already in the key: "household-S" -> "Household-S"
    group = info.display if key == info.name else f"{info.display}-{key[len(info.name) + 1:]}"
    out = []
    for role in KIND_ROLES[info.kind]:
        if role == "datasets":
            out += [Metric(f"{key}.{d}", key, (f"eval/{d}/success",), group, label, role)
                    for d, label in info.datasets if f"eval/{d}/success" in columns]
        elif role == "avg":
            sources = tuple(f"eval/{d}/success" for d, _ in info.datasets
                            if f"eval/{d}/success" in columns)
            if sources:
                out.append(Metric(f"{key}.avg", key, sources, group, ROLE_LABELS[role], role))
        else:
            split = eval_split(info, columns, role)
            if split is not None:
                out.append(Metric(f"{key}.{role}", key, (f"eval/{split}/{role}",), group,
                                  ROLE_LABELS[role], role))
    return out


def table_metrics(runs: pd.DataFrame) -> list[Metric]:
    """Every table metric the runs' envs (registry order) have logged values for."""
    keys = _env_keys(runs)
    out = []
    for key, name in sorted(set(zip(keys, runs["env"].astype(str))),
                            key=lambda kn: (env_sort_key(kn[1]), kn[0])):
        sub = runs.loc[keys == key].dropna(axis=1, how="all")
        out += env_metrics(key, env_info(name), list(sub.columns))
    return out


def _env_keys(runs: pd.DataFrame) -> pd.Series:
    levels = runs[LEVEL_PARAM] if LEVEL_PARAM in runs.columns else pd.Series(None, runs.index)
    return pd.Series([env_key(e, lv) for e, lv in zip(runs["env"], levels)], index=runs.index)


def success_metrics(metrics: Sequence[Metric]) -> dict[str, str]:
    """env key -> the metric that stands for a run's final success (avg for QA envs)."""
    out: dict[str, str] = {}
    for m in metrics:
        if m.role in ("success", "avg") and (m.env not in out or m.role == "avg"):
            out[m.env] = m.key
    return out


def with_table_metrics(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus ``env_key``, ``env_label`` and one column per table metric (NaN on
    runs of other envs).

    A multi-source metric (``<qa env>.avg``) is the per-run mean over the datasets the run
    has (the macro average over datasets, as in ETRO Table 1); the per-run value then goes
    through the seed statistics like any other metric. Column FINAL_SUCCESS holds, per run,
    its env's success metric (the average for QA envs).
    """
    out = runs.copy()
    out["env_key"] = _env_keys(runs)
    levels = runs[LEVEL_PARAM] if LEVEL_PARAM in runs.columns else [None] * len(runs)
    out["env_label"] = [env_info(e).label(lv) for e, lv in zip(runs["env"], levels)]
    metrics = table_metrics(runs)
    for m in metrics:
        values = runs[list(m.source)].mean(axis=1, skipna=True)
        out[m.key] = np.where(out["env_key"] == m.env, values, np.nan)
    out[FINAL_SUCCESS] = np.nan
    for key, metric in success_metrics(metrics).items():
        out.loc[out["env_key"] == key, FINAL_SUCCESS] = out.loc[out["env_key"] == key, metric]
    return out


def config_columns(runs: pd.DataFrame) -> list[str]:
    """Param columns that define a cell: every loader param column except identity tags,
    tracking / output settings, metrics (keys with ``/``) and the report's derived columns."""
    return [c for c in runs.columns
            if "/" not in c and c not in IDENTITY_COLUMNS and c not in DERIVED_COLUMNS
            and not c.startswith(NON_CELL_PREFIXES)]


def add_variants(runs: pd.DataFrame, params: Sequence[str] | None = None) -> pd.DataFrame:
    """``runs`` (index reset) with ``variant`` (one per cell) and ``variant_params``.

    Within each (env key, backbone) the cells of a method are its distinct ``cell_id`` values
    (or, without that tag, its distinct configs). The params named in a method's variant are
    those of ``params`` (default: :func:`config_columns`) that take more than one value among
    the method's runs of some (env key, backbone), in the order they come (never
    ``env.level``: the level is part of the env key, with columns of its own); ``variant`` is
    ``"method (sym=value, ...)"`` with values rounded to 3 significant digits, and two cells
    that still read the same get their cell id appended, so distinct configs never share a
    row. ``variant_params`` is the tuple of (param, value) pairs in the label. A run whose
    ``writer.kind`` is not its method's own (tag ``method_writer``: the paper's setting) is
    always labelled with its writer (``"etro (writer=frozen)"``).
    """
    out = runs.reset_index(drop=True)
    params = config_columns(out) if params is None else [p for p in params if p in out.columns]
    cell = out["cell_id"].astype(str) if "cell_id" in out.columns else \
        out[params].astype(str).agg("|".join, axis=1) if params else pd.Series("", out.index)
    # an env's level is part of its columns (env keys: "household-S"), never of a row label
    params = [p for p in params if p != LEVEL_PARAM]
    strata = [(_env_keys(out) if c == "env" else out[c]).rename(c) for c in ("env", "backbone")
              if c in out.columns]
    text = out[params].astype(str)
    counts = text.groupby([out["method"], *strata], sort=False).nunique()
    swept_of = (counts > 1).groupby(level=0, sort=False).any()  # [methods, params]
    variant = out["method"].astype(str).tolist()
    pairs: list[tuple] = [()] * len(out)
    values = out[params].to_dict("list")
    swept_by = {m: [p for p, hit in zip(params, row) if hit]
                for m, row in zip(swept_of.index, swept_of.to_numpy())}
    own = _non_default_writer(out)
    for i, method in enumerate(variant):
        swept = swept_by.get(method, [])
        if own[i] and "writer.kind" not in swept:
            swept = [*swept, "writer.kind"]
        if swept:
            pairs[i] = tuple((p, values[p][i]) for p in swept)
            variant[i] = f"{method} ({', '.join(_param_text(p, v) for p, v in pairs[i])})"
    out["variant"] = variant
    out["variant_params"] = pd.Series(pairs, index=out.index, dtype=object)
    per = out.assign(_cell=cell).groupby([*strata, out["variant"]], sort=False)["_cell"]
    clash = per.transform("nunique") > 1
    out.loc[clash, "variant"] = [f"{v} [cell {c[:6]}]" for v, c in
                                 zip(out.loc[clash, "variant"], cell[clash])]
    return out


def prepare_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The loader's run frame with variants (cells) and table metrics: what every layout,
    figure and diagnostic of a report shares, so rows read the same everywhere."""
    if "variant" in runs.columns and "env_key" in runs.columns:
        return runs
    return with_table_metrics(add_variants(runs))


def _non_default_writer(runs: pd.DataFrame) -> list[bool]:
    """Per row: its writer.kind is known and differs from its method's own writer."""
    if "writer.kind" not in runs.columns or "method_writer" not in runs.columns:
        return [False] * len(runs)
    kind, own = runs["writer.kind"], runs["method_writer"]
    return (kind.notna() & own.notna() & (own.astype(str) != "")
            & (kind.astype(str) != own.astype(str))).tolist()


def param_symbol(param: str) -> str:
    """How a label names a param: its symbol (α, β, λ, writer) or its last dotted part."""
    return PARAM_SYMBOLS.get(param, param.rpartition(".")[2])


def _param_text(param: str, value) -> str:
    symbol = param_symbol(param)
    return f"{symbol}={format_value(value)}"


def format_value(value) -> str:
    """A param value as a label shows it: numbers to 3 significant digits (2.38611 ->
    2.39, 0.0195789 -> 0.0196, 5.0 -> 5), anything else as text."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "none"
    return f"{value:.3g}"
