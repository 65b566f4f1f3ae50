"""Paper-table layouts: pure functions from a layout summary frame to a :class:`Table`.

Each :class:`Layout` names the methods it shows, the baseline its markers compare against,
and a ``build(summary) -> Table | Skipped`` function. The summary is the long frame of
:func:`summarize_layout` (computed on the layout's own runs, so that the Holm family and
"not worse than the best" refer to the rows the table shows):

    env, backbone, variant, method, <swept params>, metric, n, mean, std, ci_low, ci_high,
    n_paired, diff_vs_baseline, p_vs_baseline, p_holm, significant, not_worse_than_best,
    run_ids

``variant`` is the method name, plus the values of the params in SWEEP_PARAMS that the
method takes more than one value of in the study (``"etro_suffix_positive (α=0.25)"``), so
a swept method gives one row per value. ``metric`` is a :class:`Metric` key.

Layouts (ETRO = etro-paper.md, SEED = seed-review.txt):

* ``etro_table1`` -- ETRO Table 1: methods grouped by backbone, household success, searchqa
  per-dataset accuracy and average, shop score and success; baseline GRPO.
* ``seed_ablation`` -- SEED Table 2: full / w/o skill SFT / w/o self-evolving / static
  library; markers against the full method.
* ``etro_branches`` -- ETRO Table 2 (skill selection and branch combination); baseline GRPO.
* ``etro_suffix`` -- ETRO Table 3 (suffix supervision and boundary selection); vs ETRO.
* ``etro_alpha`` -- ETRO Table 4: post-error weight alpha x suffix skill; alpha = 0 is ETRO.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.diagnostics import Skipped
from analysis.stats import summarize
from reports.tables import Cell, Column, Row, Section, Table, significance_marker

SWEEP_PARAMS = ("algo.suffix_weight", "algo.beta_opd", "algo.lambda_opd")
PARAM_SYMBOLS = {"algo.suffix_weight": "α", "algo.beta_opd": "β", "algo.lambda_opd": "λ"}
SUMMARY_KEYS = ("env", "backbone", "variant")
SEARCHQA_DATASETS = (("nq", "NQ"), ("triviaqa", "Triv"), ("popqa", "Pop"), ("hotpotqa", "Hotp"),
                     ("2wiki", "2Wk"), ("musique", "MuS"), ("bamboogle", "Bam"))
METHOD_LABELS = {
    "grpo": "GRPO", "grpo_opsd": "GRPO+OPSD", "opsd": "OPSD", "skill_sd": "Skill-SD",
    "rlsd": "RLSD", "sdar": "SDAR", "seed": "SEED", "etro": "ETRO",
    "seed_no_sft": "w/o skill SFT", "seed_stale": "w/o self-evolving",
    "seed_static": "static skill library", "skill_grpo": "Skill-GRPO",
    "skill_grpo_star": "Skill-GRPO*", "skill_prompt": "Skill-Prompt", "vanilla": "Vanilla",
    "etro_global_positive": "Global Positive", "etro_global_negative": "Global Negative",
    "etro_global_both": "Global Both", "etro_positive_only": "Positive Only",
    "etro_negative_only": "Negative Only", "etro_suffix_positive": "Suffix Positive",
    "etro_suffix_negative": "Suffix Negative", "etro_random_boundary": "Random Boundary",
    "etro_neg_prefix": "Negative at prefix", "etro_neg_suffix": "Negative at suffix",
    "opid": "OPID", "icsd": "ICSD",
}


@dataclass(frozen=True)
class Metric:
    """A table metric: ``key`` (also the reported-CSV header), the env whose runs carry it,
    the run-frame ``source`` column(s) (several are averaged per run), and its header."""

    key: str
    env: str
    source: tuple[str, ...]
    group: str
    label: str

    def column(self) -> Column:
        return Column(self.key, self.group, self.label)


METRICS = (
    Metric("household.success", "household", ("eval/eval_unseen/success",), "Household", "Succ."),
    *(Metric(f"searchqa.{d}", "searchqa", (f"eval/{d}/success",), "SearchQA", label)
      for d, label in SEARCHQA_DATASETS),
    Metric("searchqa.avg", "searchqa", tuple(f"eval/{d}/success" for d, _ in SEARCHQA_DATASETS),
           "SearchQA", "Avg."),
    Metric("shop.score", "shop", ("eval/eval/score",), "Shop", "Score"),
    Metric("shop.success", "shop", ("eval/eval/success",), "Shop", "Succ."),
)
HEADLINE = ("household.success", "searchqa.avg", "shop.score", "shop.success")
# Per env, the success metric that stands for a run in figures (column FINAL_SUCCESS).
SUCCESS_BY_ENV = {"household": "household.success", "searchqa": "searchqa.avg",
                  "shop": "shop.success"}
FINAL_SUCCESS = "final_success"
_BY_KEY = {m.key: m for m in METRICS}


def with_table_metrics(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus one column per :data:`METRICS` key, NaN on runs of other envs.

    A multi-source metric (``searchqa.avg``) is the per-run mean over the sources the run
    has (the macro average over datasets, as in ETRO Table 1); the per-run value then goes
    through the seed statistics like any other metric. Column FINAL_SUCCESS holds, per run,
    its env's metric in SUCCESS_BY_ENV.
    """
    out = runs.copy()
    for m in METRICS:
        present = [c for c in m.source if c in runs.columns]
        values = runs[present].mean(axis=1, skipna=True) if present else np.nan
        out[m.key] = np.where(runs["env"] == m.env, values, np.nan) if present else np.nan
    out[FINAL_SUCCESS] = np.nan
    for env, key in SUCCESS_BY_ENV.items():
        out.loc[out["env"] == env, FINAL_SUCCESS] = out.loc[out["env"] == env, key]
    return out


def add_variants(runs: pd.DataFrame, params: Sequence[str] = SWEEP_PARAMS) -> pd.DataFrame:
    """``runs`` with a ``variant`` column: the method, plus ``(sym=value, ...)`` for every param
    of ``params`` that takes more than one value among that method's runs (index reset)."""
    out = runs.reset_index(drop=True)
    present = [p for p in params if p in runs.columns]
    labels = out["method"].astype(str)
    for method, group in out.groupby("method", sort=False):
        swept = [p for p in present if group[p].nunique(dropna=True) > 1]
        if swept:
            labels.loc[group.index] = [f"{method} ({', '.join(_param_text(p, r[p]) for p in swept)})"
                                       for _, r in group.iterrows()]
    out["variant"] = labels
    return out


def summarize_layout(runs: pd.DataFrame, layout: Layout, *, alpha: float = 0.05,
                     n_boot: int = 2000, seed: int = 0) -> pd.DataFrame | Skipped:
    """The layout's summary frame (module doc), from the loader's run frame.

    Restricted to ``layout.methods``; for every :data:`METRICS` key with data,
    :func:`analysis.stats.summarize` by (env, backbone, variant) comparing variants within
    (env, backbone), paired by seed against ``layout.baseline`` when it is present.
    """
    need = [c for c in ("run_id", "env", "backbone", "method", "seed") if c not in runs.columns]
    if need:
        return Skipped(layout.name, f"run frame lacks columns {need}")
    data = add_variants(with_table_metrics(runs[runs["method"].isin(layout.methods)]))
    if data.empty:
        return Skipped(layout.name, f"no runs of methods {list(layout.methods)}")
    parts = [_summarize_metric(data, m, layout.baseline, alpha, n_boot, seed)
             for m in METRICS if data[m.key].notna().any()]
    parts = [p for p in parts if p is not None]
    if not parts:
        return Skipped(layout.name, f"runs of {sorted(set(data['method']))} have no "
                                    f"evaluation metric of {[m.key for m in METRICS]}")
    info = data.groupby("variant", sort=False).first()
    info = info[["method", *[p for p in SWEEP_PARAMS if p in data.columns]]]
    return pd.concat(parts, ignore_index=True).merge(info, left_on="variant", right_index=True)


def _summarize_metric(data, metric: Metric, baseline, alpha, n_boot, seed):
    sub = data[data["env"] == metric.env].dropna(subset=[metric.key])
    if sub.empty:
        return None
    base = baseline if baseline in set(sub["variant"]) else None
    out = summarize(sub, list(SUMMARY_KEYS), metric.key, baseline=base, compare="variant",
                    alpha=alpha, n_boot=n_boot, seed=seed)
    ids = sub.groupby(list(SUMMARY_KEYS), sort=False)["run_id"].agg(lambda s: tuple(sorted(s)))
    out = out.merge(ids.rename("run_ids"), left_on=list(SUMMARY_KEYS), right_index=True)
    return out.assign(metric=metric.key)


# ---------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """A paper table: its methods (row order), marker baseline, metric keys (column order),
    display labels overriding METHOD_LABELS, and ``builder(layout, summary)``."""

    name: str
    title: str
    methods: tuple[str, ...]
    baseline: str | None
    metrics: tuple[str, ...]
    builder: Callable[[Layout, pd.DataFrame], Table | Skipped]
    labels: Mapping[str, str] = field(default_factory=dict)

    def table(self, summary: pd.DataFrame | Skipped) -> Table | Skipped:
        """The table model from this layout's summary (a Skipped passes through)."""
        return summary if isinstance(summary, Skipped) else self.builder(self, summary)


def method_table(layout: Layout, summary: pd.DataFrame) -> Table | Skipped:
    """Rows = the layout's methods (each variant of a swept method on its own row), in
    layout order, grouped into one section per backbone; columns = the layout's metrics
    that have data. Skipped when none of the methods or metrics is in ``summary``."""
    labels = {**METHOD_LABELS, **layout.labels}
    return _table(layout, summary, ("Method",),
                  lambda r: (_variant_label(r, labels),), _method_order(layout))


def _table(layout: Layout, summary: pd.DataFrame, headers: tuple[str, ...],
           row_labels: Callable[[pd.Series], tuple[str, ...]],
           order: Callable[[pd.Series], tuple]) -> Table | Skipped:
    data = summary[summary["method"].isin(layout.methods)
                   & summary["metric"].isin(layout.metrics)]
    if data.empty:
        return Skipped(layout.name, f"summary has none of methods {list(layout.methods)} with "
                                    f"metrics {list(layout.metrics)}")
    columns = tuple(_BY_KEY[k].column() for k in layout.metrics if k in set(data["metric"]))
    sections = []
    for backbone, part in data.groupby("backbone", sort=True):
        variants = part.drop_duplicates("variant").copy()
        variants = variants.iloc[sorted(range(len(variants)), key=lambda i: order(variants.iloc[i]))]
        rows = tuple(Row(row_labels(v), _cells(part[part["variant"] == v["variant"]], columns))
                     for _, v in variants.iterrows())
        sections.append(Section(str(backbone), rows))
    baseline = METHOD_LABELS.get(layout.baseline, layout.baseline) if layout.baseline else None
    return Table(layout.name, layout.title, headers, columns, tuple(sections), baseline)


def _cells(rows: pd.DataFrame, columns: Sequence[Column]) -> dict[str, Cell]:
    """Column key -> Cell from one variant's summary rows (one row per metric)."""
    out = {}
    for col in columns:
        hit = rows[rows["metric"] == col.key]
        if hit.empty:
            continue
        r = hit.iloc[0]
        marker = significance_marker(bool(r["significant"]), float(r["diff_vs_baseline"]),
                                     col.higher_is_better)
        out[col.key] = Cell(float(r["mean"]), float(r["std"]), int(r["n"]),
                            bool(r["not_worse_than_best"]), marker, tuple(r["run_ids"]))
    return out


def _method_order(layout: Layout) -> Callable[[pd.Series], tuple]:
    rank = {m: i for i, m in enumerate(layout.methods)}
    return lambda r: (rank[r["method"]], *_param_values(r))


def _param_values(row: pd.Series) -> tuple[float, ...]:
    return tuple(float(row[p]) if p in row.index and pd.notna(row[p]) else -math.inf
                 for p in SWEEP_PARAMS)


def _variant_label(row: pd.Series, labels: dict[str, str]) -> str:
    name = labels.get(row["method"], row["method"])
    return name + row["variant"][len(row["method"]):]


def _param_text(param: str, value) -> str:
    symbol = PARAM_SYMBOLS.get(param, param)
    return f"{symbol}={value:g}" if isinstance(value, numbers.Real) else f"{symbol}={value}"


def alpha_table(layout: Layout, summary: pd.DataFrame) -> Table | Skipped:
    """ETRO Table 4: rows (suffix skill, alpha), with ETRO as the shared alpha = 0 endpoint."""
    param = "algo.suffix_weight"
    if param not in summary.columns:
        return Skipped(layout.name, f"summary has no {param} column (the study logs no alpha)")
    suffix = summary[summary["method"].isin(layout.methods[1:])]
    alphas = sorted(set(suffix[param].dropna()) - {0.0})
    if len(alphas) < 2:
        return Skipped(layout.name, f"suffix methods ran with alpha {alphas}; the sweep needs "
                                    "two or more nonzero algo.suffix_weight values")
    rank = {m: i for i, m in enumerate(layout.methods)}
    return _table(layout, summary, ("Method", "α"),
                  lambda r: (METHOD_LABELS[r["method"]],
                             "0" if r["method"] == "etro" else f"{r[param]:g}"),
                  lambda r: (rank[r["method"]], float(r[param])))


_HEADLINE_ORDER = ("shop.success", "shop.score", "household.success", "searchqa.avg")
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout("etro_table1", "Results by backbone (ETRO Table 1; %, higher is better)",
           ("grpo", "grpo_opsd", "skill_sd", "rlsd", "sdar", "seed", "etro"), "grpo",
           tuple(m.key for m in METRICS), method_table),
    Layout("seed_ablation", "SEED ablation (SEED Table 2; %)",
           ("seed", "seed_no_sft", "seed_stale", "seed_static"), "seed", HEADLINE,
           method_table, {"seed": "SEED (full)"}),
    Layout("etro_branches", "Skill selection and branch combination (ETRO Table 2; %)",
           ("grpo", "etro_global_positive", "etro_global_negative", "etro_global_both",
            "etro_positive_only", "etro_negative_only", "etro"), "grpo", _HEADLINE_ORDER,
           method_table),
    Layout("etro_suffix", "Suffix supervision and boundary selection (ETRO Table 3; %)",
           ("etro_suffix_positive", "etro_suffix_negative", "etro_random_boundary", "etro"),
           "etro", _HEADLINE_ORDER, method_table),
    Layout("etro_alpha", "Post-error OPD weight α × suffix skill (ETRO Table 4; %)",
           ("etro", "etro_suffix_positive", "etro_suffix_negative"), "etro", _HEADLINE_ORDER,
           alpha_table),
)}


def layout_names() -> list[str]:
    return list(LAYOUTS)


def get_layout(name: str) -> Layout:
    """The layout called ``name``; an unknown name raises ValueError listing the valid ones."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ValueError(f"unknown table layout {name!r}; valid: {', '.join(LAYOUTS)}") from None
