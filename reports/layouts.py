"""Paper-table layouts: which rows and columns each paper table has, and the pure functions
from its summary frame to a :class:`Table`.

Each :class:`Layout` names the methods it shows, the baseline its markers compare against,
the *roles* of its columns (``success``, ``score``, ``datasets``, ``avg``; the env registry
:mod:`reports.envs` turns roles into the columns of the envs a study ran) and a
``build(summary) -> Table | Skipped`` function. :func:`layout_rows` picks a layout's runs
(prepared: :mod:`reports.prepared`) and metrics; :func:`analysis.summaries.summarize_rows`
computes its summary frame (module doc there) on those runs only, so that the Holm family
and "not worse than the best" refer to the rows the table shows; ``summary["env"]`` is the
env key and ``summary["metric"]`` a :class:`~reports.prepared.Metric` key.

Layouts (ETRO = etro-paper.md, SEED = seed-review.txt):

* ``etro_table1`` -- ETRO Table 1: methods grouped by backbone, every env's columns
  (household/ALFWorld success, QA per-dataset accuracy and average, shop/WebShop score and
  success); baseline GRPO; a plugin's methods as rows after the paper's.
* ``seed_ablation`` -- SEED Table 2: full / w/o skill SFT / w/o self-evolving / static
  library; markers against the full method.
* ``seed_writer`` -- not a paper table: SEED against its self-writer probes (the stale
  analyzer, never refreshed; the format-constrained writer; Stage-1 writer replay, not
  SEED); markers against SEED.
* ``etro_branches`` -- ETRO Table 2 (skill selection and branch combination); baseline GRPO.
* ``etro_suffix`` -- ETRO Table 3 (suffix supervision and boundary selection); vs ETRO.
* ``etro_alpha`` -- ETRO Table 4: post-error weight alpha x suffix skill; alpha = 0 is ETRO.
* ``seed_multimodal`` -- SEED's multimodal table (review, "Multimodal Extension"): GRPO and
  SEED on Sokoban and EZPoints and their average ("Sokoban / EZPoints / Avg."); the
  average is taken per seed over the envs (a seed counts where it ran on every env), then
  summarised like any column, paired by seed against GRPO.  Only runs whose policy saw
  the env's images (``env.images``) count: a text-only EZPoints study is not multimodal.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis.diagnostics import Skipped
from analysis.stats import CI_METHODS, MIN_PAIRED
from analysis.summaries import SWEEP_PARAMS
from reports.envs import ACROSS_ENVS, KIND_ROLES, ROLE_LABELS, env_info, env_sort_key
from reports.prepared import (
    FINAL_SUCCESS,
    Metric,
    format_value,
    param_symbol,
    prepare_runs,
    table_metrics,
)
from reports.style import method_label, plugin_methods, variant_label
from reports.tables import Cell, Column, Row, Section, Table, significance_marker

IMAGES_PARAM = "env.images"
ROLES = ("success", "score", "datasets", "avg")
HEADLINE = ("success", "score", "avg")


@dataclass(frozen=True)
class LayoutRows:
    """A layout's share of a study: its prepared runs, its metrics (in table-metric order)
    and, for a layout with an average column, the metric of that column."""

    data: pd.DataFrame
    metrics: tuple[Metric, ...]
    average: Metric | None = None


def layout_rows(runs: pd.DataFrame, layout: Layout) -> LayoutRows | Skipped:
    """The runs and metrics a layout's table summarises, from the loader's run frame (or its
    :func:`~reports.prepared.prepare_runs` form): the runs of ``layout.methods`` (and
    ``layout.envs``; only runs that saw images for an ``images`` layout) and the table
    metrics of ``layout.roles``. Skipped, with the reason, when no method but the baseline
    (or none) ran."""
    need = [c for c in ("run_id", "env", "backbone", "method", "seed") if c not in runs.columns]
    if need:
        return Skipped(layout.name, f"run frame lacks columns {need}")
    data = prepare_runs(runs)
    data = data[data["method"].isin(layout.rows)]
    if layout.envs:
        data = data[data["env"].astype(str).isin(layout.envs)]
    if layout.images:
        seen = data[IMAGES_PARAM].eq(True) if IMAGES_PARAM in data.columns else \
            pd.Series(False, data.index)
        if len(data) and not seen.any():
            return Skipped(layout.name, f"no run of {sorted(set(data['env']))} saw images "
                                        f"({IMAGES_PARAM}: a multimodal table needs a vision env)")
        data = data[seen]
    if data.empty or set(data["method"]) == {layout.baseline}:
        return Skipped(layout.name, f"no runs of methods {list(layout.rows)}"
                       + (f" besides the baseline {layout.baseline}" if len(data) else ""))
    metrics = tuple(m for m in table_metrics(data) if m.role in layout.roles)
    average = Metric(f"{ACROSS_ENVS}.success", ACROSS_ENVS, (FINAL_SUCCESS,), "Avg.", "Succ.",
                     "success") if layout.average else None
    return LayoutRows(data, metrics, average)


def no_metric(layout: Layout, rows: LayoutRows) -> Skipped:
    """Why a layout's table is empty when none of its metrics has a value."""
    data = rows.data
    return Skipped(layout.name, f"runs of {sorted(set(data['method']))} (envs "
                                f"{sorted(set(data['env']))}) have no evaluation metric "
                                f"for the columns {list(layout.roles)}")


@dataclass(frozen=True)
class Layout:
    """A paper table: its methods (row order), marker baseline, column roles (see the
    module doc), display labels overriding the methods' own (:mod:`reports.style`), and
    ``builder(layout, summary)``."""

    name: str
    title: str
    methods: tuple[str, ...]
    baseline: str | None
    roles: tuple[str, ...]
    builder: Callable[[Layout, pd.DataFrame], Table | Skipped]
    labels: Mapping[str, str] = field(default_factory=dict)
    # the env names the table covers (empty: every env the study ran)
    envs: tuple[str, ...] = ()
    # add the per-seed average of the envs' success as a last column ("Avg.")
    average: bool = False
    # only runs whose policy saw the env's images (param env.images): a multimodal table
    images: bool = False
    # also the methods plugins registered, as rows after its own (reports.style.plugin_methods)
    plugins: bool = False

    @property
    def rows(self) -> tuple[str, ...]:
        """The methods the table shows: its own, then (with ``plugins``) the plugins'."""
        extra = tuple(m for m in plugin_methods() if m not in self.methods) if self.plugins else ()
        return self.methods + extra

    def table(self, summary: pd.DataFrame | Skipped) -> Table | Skipped:
        """The table model from this layout's summary (a Skipped passes through)."""
        return summary if isinstance(summary, Skipped) else self.builder(self, summary)


def method_table(layout: Layout, summary: pd.DataFrame) -> Table | Skipped:
    """Rows = the layout's methods (each cell of a swept method on its own row), in
    layout order, grouped into one section per backbone; columns = the layout's roles for
    every env with data. Skipped when none of the methods or metrics is in ``summary``."""
    return _table(layout, summary, ("Method",),
                  lambda r: (variant_label(r["method"], r["variant"], layout.labels),),
                  _method_order(layout))


def metric_column(key: str) -> Column:
    """The Column of a metric key ``<env key>.<role or dataset>`` from the env registry."""
    env_part, _, role = key.rpartition(".")
    name, _, level = env_part.partition("-")
    info = env_info(name)
    group = info.display + (f"-{level}" if level else "")
    label = ROLE_LABELS.get(role) or dict(info.datasets).get(role, role)
    return Column(key, group, label)


def _columns(data: pd.DataFrame) -> tuple[Column, ...]:
    """Columns in env-registry order, then role order, then first appearance."""
    firsts = data.drop_duplicates("metric")
    cols = []
    for i, (_, r) in enumerate(firsts.iterrows()):
        col = metric_column(r["metric"])
        if "metric_group" in r.index and isinstance(r["metric_group"], str):
            col = Column(r["metric"], r["metric_group"], r["metric_label"])
        env = r["metric"].rpartition(".")[0]
        role = r.get("metric_role") if isinstance(r.get("metric_role"), str) else \
            r["metric"].rpartition(".")[2]
        order = KIND_ROLES[env_info(env.partition("-")[0]).kind]
        rank = order.index(role) if role in order else len(order)
        cols.append(((env_sort_key(env.partition("-")[0]), env, rank, i), col))
    return tuple(c for _, c in sorted(cols, key=lambda kc: kc[0]))


def _table(layout: Layout, summary: pd.DataFrame, headers: tuple[str, ...],
           row_labels: Callable[[pd.Series], tuple[str, ...]],
           order: Callable[[pd.Series], tuple]) -> Table | Skipped:
    roles = summary["metric_role"] if "metric_role" in summary.columns else \
        summary["metric"].map(lambda k: _role_of(k))
    data = summary[summary["method"].isin(layout.rows) & roles.isin(layout.roles)]
    if data.empty:
        return Skipped(layout.name, f"summary has none of methods {list(layout.rows)} with "
                                    f"columns {list(layout.roles)}")
    columns = _columns(data)
    sections = []
    for backbone, part in data.groupby("backbone", sort=True):
        variants = part.drop_duplicates("variant").copy()
        variants = variants.iloc[sorted(range(len(variants)), key=lambda i: order(variants.iloc[i]))]
        rows = tuple(Row(row_labels(v), _cells(part[part["variant"] == v["variant"]], columns))
                     for _, v in variants.iterrows())
        sections.append(Section(str(backbone), rows))
    baseline, notes = _baseline_text(layout, data)
    ci = str(data["ci_method"].iloc[0]) if "ci_method" in data.columns else "t"
    return Table(layout.name, layout.title, headers, columns, tuple(sections), baseline,
                 notes=notes, ci_method=CI_METHODS.get(ci, ci))


def _role_of(key: str) -> str:
    role = key.rpartition(".")[2]
    return role if role in ROLES else "datasets"


def _baseline_text(layout: Layout, data: pd.DataFrame) -> tuple[str | None, tuple[str, ...]]:
    """The caption's baseline name (None when no marker can be drawn) and a note saying why
    markers are absent, so a caption never promises markers that are not drawn."""
    if layout.baseline is None:
        return None, ()
    name = method_label(layout.baseline, layout.labels)
    base = data[data["method"] == layout.baseline]
    if base.empty:
        return None, (f"No significance markers: {name} is not in the table.",)
    if not (data["n_paired"] >= MIN_PAIRED).any():
        return None, (f"No significance markers: no comparison with {name} has "
                      f"{MIN_PAIRED} or more paired seeds.",)
    swept = sorted({p for ps in base.get("variant_params", pd.Series([()])) for p, _ in ps})
    if swept:
        name += " at the same " + ", ".join(param_symbol(p) for p in swept)
    return name, ()


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
                            bool(r["not_worse_than_best"]), marker, tuple(r["run_ids"]),
                            ci_low=float(r["ci_low"]), ci_high=float(r["ci_high"]),
                            n_paired=int(r["n_paired"]), diff=float(r["diff_vs_baseline"]),
                            p_holm=float(r["p_holm"]),
                            p_vs_best=float(r.get("p_vs_best", math.nan)),
                            mde=float(r.get("mde_vs_baseline", math.nan)))
    return out


def _method_order(layout: Layout) -> Callable[[pd.Series], tuple]:
    rank = {m: i for i, m in enumerate(layout.rows)}
    return lambda r: (rank[r["method"]], *_param_values(r), str(r["variant"]))


def _param_values(row: pd.Series) -> tuple:
    pairs = row["variant_params"] if "variant_params" in row.index and \
        isinstance(row["variant_params"], tuple) else tuple((p, row.get(p)) for p in SWEEP_PARAMS)
    return tuple((0, float(v)) if isinstance(v, numbers.Real) and not pd.isna(v) else (1, str(v))
                 for _, v in pairs)


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
                  lambda r: (method_label(r["method"]),
                             "0" if r["method"] == "etro" else format_value(r[param])),
                  lambda r: (rank[r["method"]], float(r[param]), str(r["variant"])))


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout("etro_table1", "Results by backbone (ETRO Table 1; %, higher is better)",
           ("grpo", "grpo_opsd", "skill_sd", "rlsd", "seed", "etro"), "grpo",
           ROLES, method_table, plugins=True),
    Layout("seed_ablation", "SEED ablation (SEED Table 2; %)",
           ("seed", "seed_no_sft", "seed_no_self_evolving", "seed_static"), "seed", HEADLINE,
           method_table, {"seed": "SEED (full)"}),
    Layout("seed_writer", "SEED's self writer through RL (this tool's probes, not a paper table; %)",
           ("seed", "seed_stale", "seed_constrained", "seed_writer_replay"), "seed", HEADLINE,
           method_table,
           {"seed": "SEED (refreshed, free sampling)"}),
    Layout("etro_branches", "Skill selection and branch combination (ETRO Table 2; %)",
           ("grpo", "etro_global_positive", "etro_global_negative", "etro_global_both",
            "etro_positive_only", "etro_negative_only", "etro"), "grpo", HEADLINE,
           method_table),
    Layout("etro_suffix", "Suffix supervision and boundary selection (ETRO Table 3; %)",
           ("etro_suffix_positive", "etro_suffix_negative", "etro_random_boundary",
            "etro_neg_prefix", "etro_neg_suffix", "etro"), "etro", HEADLINE, method_table),
    Layout("etro_alpha", "Post-error OPD weight α × suffix skill (ETRO Table 4; %)",
           ("etro", "etro_suffix_positive", "etro_suffix_negative"), "etro", HEADLINE,
           alpha_table),
    Layout("seed_multimodal", "Multimodal agents (SEED review, Multimodal Extension; success %)",
           ("grpo", "seed"), "grpo", ("success",), method_table, envs=("sokoban", "ezpoints"),
           average=True, images=True),
)}


def layout_names() -> list[str]:
    return list(LAYOUTS)


def get_layout(name: str) -> Layout:
    """The layout called ``name``; an unknown name raises ValueError listing the valid ones."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ValueError(f"unknown table layout {name!r}; valid: {', '.join(LAYOUTS)}") from None
