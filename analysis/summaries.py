"""Statistics of a paper table's rows: per row (a cell) and metric, the statistics over
seeds and the tests against the table's baseline (:func:`analysis.stats.summarize`).

The input is one table's runs as the report prepared them (``reports.layouts.layout_rows``:
the runs of the table's methods and envs, one row per run with ``run_id, env, env_key,
backbone, method, variant, variant_params, seed`` and one column per table metric) and the
table's metrics: objects with a ``key`` (the run-frame column), the ``env`` key whose runs
carry it and the ``group`` / ``label`` / ``role`` the summary carries along for the table.
The output is the long summary frame a table is built from:

    env, backbone, variant, n, mean, std, ci_low, ci_high, n_paired, diff_vs_baseline,
    p_vs_baseline, p_holm, significant, p_vs_best, not_worse_than_best, run_ids, metric,
    metric_group, metric_label, metric_role, ci_method, method, variant_params, <params>

(``env`` is the env key). Each metric is summarised on the table's own rows, so that the
Holm family and "not worse than the best" refer to the rows the table shows.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Protocol

import pandas as pd

from analysis.stats import summarize

SUMMARY_KEYS = ("env", "backbone", "variant")
# Params a paper table sweeps; the summary carries their values for the row labels and order.
SWEEP_PARAMS = ("algo.suffix_weight", "algo.beta_opd", "algo.lambda_opd")


class TableMetric(Protocol):
    """A table column as the statistics need it (reports.prepared.Metric is one)."""

    key: str
    env: str
    source: tuple[str, ...]
    group: str
    label: str
    role: str


def summarize_rows(data: pd.DataFrame, metrics: Sequence[TableMetric], baseline: str | None,
                   *, average: TableMetric | None = None, alpha: float = 0.05, ci: str = "t",
                   n_boot: int = 2000, seed: int = 0) -> pd.DataFrame | None:
    """The summary frame (module doc) of a table's rows, or None when no metric has a value.

    For every metric with data, :func:`analysis.stats.summarize` by (env, backbone, variant)
    comparing variants within (env, backbone), paired by seed against the ``baseline``
    method: against its only cell, or, when the baseline itself was swept, against the
    baseline cell with the same values of the params the baseline varies (rows without a
    match are not tested; :func:`baseline_map`). ``average``: a metric whose values are the
    per-seed mean over the envs of the table (:func:`across_envs`; its ``source[0]`` is the
    per-run column averaged, its ``env`` the pseudo env key of the column).
    """
    base = baseline_map(data, baseline)
    parts = [_summarize_metric(data, m, base, alpha, ci, n_boot, seed) for m in metrics]
    if average is not None:
        mean = across_envs(data, average)
        summary = _summarize_metric(mean, average, base, alpha, ci, n_boot, seed) \
            if len(mean) else None
        if summary is not None:  # the runs behind each average, one id each
            summary["run_ids"] = [tuple(sorted(i for ids in row for i in ids.split(",")))
                                  for row in summary["run_ids"]]
        parts.append(summary)
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    info = data.groupby("variant", sort=False).first()
    extra = [p for p in dict.fromkeys([*SWEEP_PARAMS, *(k for ps in data["variant_params"]
                                                         for k, _ in ps)]) if p in data.columns]
    info = info[["method", "variant_params", *extra]]
    return pd.concat(parts, ignore_index=True).merge(info, left_on="variant", right_index=True)


def across_envs(data: pd.DataFrame, metric: TableMetric) -> pd.DataFrame:
    """One pseudo run per (backbone, variant, seed) that ran on every env key of ``data``:
    its ``metric.key`` (and ``metric.source[0]``) column is the mean of ``metric.source[0]``
    over those envs' runs (runs of one seed and env averaged first), ``env`` / ``env_key``
    is ``metric.env`` and ``run_id`` joins the runs it averages. Empty when fewer than two
    env keys ran."""
    keys = sorted(set(data["env_key"]))
    if len(keys) < 2:
        return data.iloc[:0]
    source = metric.source[0]
    per_env = (data.groupby(["backbone", "variant", "seed", "env_key"], sort=False)
               .agg(value=(source, "mean"), run_id=("run_id", lambda s: ",".join(sorted(s))),
                    method=("method", "first"), variant_params=("variant_params", "first"))
               .reset_index())
    per_env = per_env.dropna(subset=["value"])
    full = per_env.groupby(["backbone", "variant", "seed"])["env_key"].transform("nunique") == len(keys)
    rows = (per_env[full].groupby(["backbone", "variant", "seed"], sort=False)
            .agg(value=("value", "mean"), run_id=("run_id", ",".join), method=("method", "first"),
                 variant_params=("variant_params", "first"))
            .reset_index())
    return rows.assign(env=metric.env, env_key=metric.env, **{source: rows["value"],
                                                             metric.key: rows["value"]}).drop(columns="value")


def baseline_map(data: pd.DataFrame, baseline: str | None) -> dict[str, str]:
    """variant -> the baseline variant it is compared with (see :func:`summarize_rows`)."""
    if baseline is None:
        return {}
    first = data.drop_duplicates("variant").set_index("variant")
    bases = first[first["method"] == baseline]
    out = {}
    for variant, row in first[first["method"] != baseline].iterrows():
        hits = [b for b, brow in bases.iterrows()
                if all(p in row.index and _same(row[p], v) for p, v in brow["variant_params"])]
        if len(hits) == 1:
            out[variant] = hits[0]
    return out


def _same(a, b) -> bool:
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return str(a) == str(b)


def _summarize_metric(data, metric: TableMetric, base: Mapping, alpha, ci, n_boot, seed):
    sub = data[data["env_key"] == metric.env].dropna(subset=[metric.key])
    if sub.empty:
        return None
    sub = sub.drop(columns="env").rename(columns={"env_key": "env"})
    levels = set(sub["variant"])
    mapping = {v: b for v, b in base.items() if v in levels and b in levels}
    out = summarize(sub, list(SUMMARY_KEYS), metric.key, baseline=mapping or None,
                    compare="variant", alpha=alpha, ci=ci, n_boot=n_boot, seed=seed)
    ids = sub.groupby(list(SUMMARY_KEYS), sort=False)["run_id"].agg(lambda s: tuple(sorted(s)))
    out = out.merge(ids.rename("run_ids"), left_on=list(SUMMARY_KEYS), right_index=True)
    return out.assign(metric=metric.key, metric_group=metric.group, metric_label=metric.label,
                      metric_role=metric.role, ci_method=ci)
