"""Paper-table layouts: pure functions from a layout summary frame to a :class:`Table`.

Each :class:`Layout` names the methods it shows, the baseline its markers compare against,
the *roles* of its columns (``success``, ``score``, ``datasets``, ``avg``; the env registry
:mod:`reports.envs` turns roles into the columns of the envs a study ran: "ALFWorld Succ.",
"WebShop Score", one column per QA dataset) and a ``build(summary) -> Table | Skipped``
function. The summary is the long frame of :func:`summarize_layout` (computed on the
layout's own runs, so that the Holm family and "not worse than the best" refer to the rows
the table shows):

    env, backbone, variant, method, <label params>, metric, n, mean, std, ci_low, ci_high,
    n_paired, diff_vs_baseline, p_vs_baseline, p_holm, significant, p_vs_best,
    not_worse_than_best, run_ids

**A row is a configuration.** ``variant`` is one cell: the method plus the values of every
config param that differs between the method's cells within an (env, backbone)
(``"seed (β=2.39, λ=0.0196)"``, ``"seed (refresh_every=0)"``); runs are grouped by their
``cell_id`` (the hash of the whole resolved config except the seed), so distinct configs are
never pooled, and ``n`` is the number of seeds. ``env`` in the summary is the env key of
:func:`reports.envs.env_key` (the env name plus its level). ``metric`` is a
:class:`Metric` key ``<env key>.<role or dataset>``.

Layouts (ETRO = etro-paper.md, SEED = seed-review.txt):

* ``etro_table1`` -- ETRO Table 1: methods grouped by backbone, every env's columns
  (household/ALFWorld success, QA per-dataset accuracy and average, shop/WebShop score and
  success); baseline GRPO.
* ``seed_ablation`` -- SEED Table 2: full / w/o skill SFT / w/o self-evolving / static
  library; markers against the full method.
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

import numpy as np
import pandas as pd

from analysis.diagnostics import Skipped
from analysis.stats import CI_METHODS, MIN_PAIRED, summarize
from reports.envs import (
    ACROSS_ENVS,
    KIND_ROLES,
    LEVEL_PARAM,
    ROLE_LABELS,
    env_info,
    env_key,
    env_sort_key,
    eval_split,
)
from reports.tables import Cell, Column, Row, Section, Table, significance_marker

SWEEP_PARAMS = ("algo.suffix_weight", "algo.beta_opd", "algo.lambda_opd")
IMAGES_PARAM = "env.images"
PARAM_SYMBOLS = {"algo.suffix_weight": "α", "algo.beta_opd": "β", "algo.lambda_opd": "λ",
                 "writer.kind": "writer"}
SUMMARY_KEYS = ("env", "backbone", "variant")
# Loader columns that identify a run rather than configure it, and config prefixes that
# never define a cell (trainer.tracking.CELL_EXCLUDE).
IDENTITY_COLUMNS = ("run_id", "status", "experiment_id", "study", "cell_id", "method", "env", "backbone", "seed",
                    "algo.method", "env.name", "model.backbone", "method_writer")
NON_CELL_PREFIXES = ("tracking.", "output.", "stages.warm_start.cache")
DERIVED_COLUMNS = ("env_key", "env_label", "variant", "variant_params", "final_success")
METHOD_LABELS = {
    "grpo": "GRPO", "grpo_opsd": "GRPO+OPSD", "opsd": "OPSD", "skill_sd": "Skill-SD",
    "rlsd": "RLSD", "sdar": "SDAR", "gated_static": "Gated static skill", "seed": "SEED",
    "etro": "ETRO",
    "seed_no_sft": "w/o skill SFT", "seed_no_self_evolving": "w/o self-evolving",
    "seed_stale": "stale analyzer",
    "seed_static": "static skill library", "seed_static_oracle": "static oracle library", "skill_grpo": "Skill-GRPO",
    "skill_grpo_star": "Skill-GRPO*", "skill_prompt": "Skill-Prompt", "vanilla": "Vanilla",
    "etro_global_positive": "Global Positive", "etro_global_negative": "Global Negative",
    "etro_global_both": "Global Both", "etro_positive_only": "Positive Only",
    "etro_negative_only": "Negative Only", "etro_suffix_positive": "Suffix Positive",
    "etro_suffix_negative": "Suffix Negative", "etro_random_boundary": "Random Boundary",
    "etro_neg_prefix": "Negative at prefix", "etro_neg_suffix": "Negative at suffix",
    "opid": "OPID", "icsd": "ICSD",
}
ROLES = ("success", "score", "datasets", "avg")
HEADLINE = ("success", "score", "avg")
FINAL_SUCCESS = "final_success"


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


def summarize_layout(runs: pd.DataFrame, layout: Layout, *, alpha: float = 0.05,
                     ci: str = "t", n_boot: int = 2000, seed: int = 0) -> pd.DataFrame | Skipped:
    """The layout's summary frame (module doc), from the loader's run frame (or its
    :func:`prepare_runs` form).

    Restricted to ``layout.methods``; for every table metric with data,
    :func:`analysis.stats.summarize` by (env, backbone, variant) comparing variants within
    (env, backbone), paired by seed against the layout's baseline: against its only cell,
    or, when the baseline itself was swept, against the baseline cell with the same values
    of the params the baseline varies (rows without a match are not tested).
    """
    need = [c for c in ("run_id", "env", "backbone", "method", "seed") if c not in runs.columns]
    if need:
        return Skipped(layout.name, f"run frame lacks columns {need}")
    data = prepare_runs(runs)
    data = data[data["method"].isin(layout.methods)]
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
        return Skipped(layout.name, f"no runs of methods {list(layout.methods)}"
                       + (f" besides the baseline {layout.baseline}" if len(data) else ""))
    metrics = [m for m in table_metrics(data) if m.role in layout.roles]
    base = baseline_map(data, layout.baseline)
    parts = [_summarize_metric(data, m, base, alpha, ci, n_boot, seed) for m in metrics]
    if layout.average:
        mean = across_envs(data)
        metric = Metric(f"{ACROSS_ENVS}.success", ACROSS_ENVS, (FINAL_SUCCESS,), "Avg.", "Succ.", "success")
        summary = _summarize_metric(mean, metric, base, alpha, ci, n_boot, seed) if len(mean) else None
        if summary is not None:  # the runs behind each average, one id each
            summary["run_ids"] = [tuple(sorted(i for ids in row for i in ids.split(",")))
                                  for row in summary["run_ids"]]
        parts.append(summary)
    parts = [p for p in parts if p is not None]
    if not parts:
        return Skipped(layout.name, f"runs of {sorted(set(data['method']))} (envs "
                                    f"{sorted(set(data['env']))}) have no evaluation metric "
                                    f"for the columns {list(layout.roles)}")
    info = data.groupby("variant", sort=False).first()
    extra = [p for p in dict.fromkeys([*SWEEP_PARAMS, *(k for ps in data["variant_params"]
                                                         for k, _ in ps)]) if p in data.columns]
    info = info[["method", "variant_params", *extra]]
    return pd.concat(parts, ignore_index=True).merge(info, left_on="variant", right_index=True)


def across_envs(data: pd.DataFrame) -> pd.DataFrame:
    """One pseudo run per (backbone, variant, seed) that ran on every env key of ``data``:
    its FINAL_SUCCESS (and the metric column ``average.success``) is the mean over those
    envs' runs (runs of one seed and env averaged first), ``env`` / ``env_key`` is
    :data:`ACROSS_ENVS` and ``run_id`` joins the runs it averages.  Empty when fewer than two
    env keys ran."""
    keys = sorted(set(data["env_key"]))
    if len(keys) < 2:
        return data.iloc[:0]
    per_env = (data.groupby(["backbone", "variant", "seed", "env_key"], sort=False)
               .agg(value=(FINAL_SUCCESS, "mean"), run_id=("run_id", lambda s: ",".join(sorted(s))),
                    method=("method", "first"), variant_params=("variant_params", "first"))
               .reset_index())
    per_env = per_env.dropna(subset=["value"])
    full = per_env.groupby(["backbone", "variant", "seed"])["env_key"].transform("nunique") == len(keys)
    rows = (per_env[full].groupby(["backbone", "variant", "seed"], sort=False)
            .agg(value=("value", "mean"), run_id=("run_id", ",".join), method=("method", "first"),
                 variant_params=("variant_params", "first"))
            .reset_index())
    key = f"{ACROSS_ENVS}.success"
    return rows.assign(env=ACROSS_ENVS, env_key=ACROSS_ENVS, **{FINAL_SUCCESS: rows["value"],
                                                              key: rows["value"]}).drop(columns="value")


def baseline_map(data: pd.DataFrame, baseline: str | None) -> dict[str, str]:
    """variant -> the baseline variant it is compared with (see :func:`summarize_layout`)."""
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


def _summarize_metric(data, metric: Metric, base: dict, alpha, ci, n_boot, seed):
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


# ---------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """A paper table: its methods (row order), marker baseline, column roles (see the
    module doc), display labels overriding METHOD_LABELS, and ``builder(layout, summary)``."""

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

    def table(self, summary: pd.DataFrame | Skipped) -> Table | Skipped:
        """The table model from this layout's summary (a Skipped passes through)."""
        return summary if isinstance(summary, Skipped) else self.builder(self, summary)


def method_table(layout: Layout, summary: pd.DataFrame) -> Table | Skipped:
    """Rows = the layout's methods (each cell of a swept method on its own row), in
    layout order, grouped into one section per backbone; columns = the layout's roles for
    every env with data. Skipped when none of the methods or metrics is in ``summary``."""
    labels = {**METHOD_LABELS, **layout.labels}
    return _table(layout, summary, ("Method",),
                  lambda r: (variant_label(r["method"], r["variant"], labels),),
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
    data = summary[summary["method"].isin(layout.methods) & roles.isin(layout.roles)]
    if data.empty:
        return Skipped(layout.name, f"summary has none of methods {list(layout.methods)} with "
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
    name = {**METHOD_LABELS, **layout.labels}.get(layout.baseline, layout.baseline)
    base = data[data["method"] == layout.baseline]
    if base.empty:
        return None, (f"No significance markers: {name} is not in the table.",)
    if not (data["n_paired"] >= MIN_PAIRED).any():
        return None, (f"No significance markers: no comparison with {name} has "
                      f"{MIN_PAIRED} or more paired seeds.",)
    swept = sorted({p for ps in base.get("variant_params", pd.Series([()])) for p, _ in ps})
    if swept:
        name += " at the same " + ", ".join(PARAM_SYMBOLS.get(p, _short(p)) for p in swept)
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
                            p_vs_best=float(r.get("p_vs_best", math.nan)))
    return out


def _method_order(layout: Layout) -> Callable[[pd.Series], tuple]:
    rank = {m: i for i, m in enumerate(layout.methods)}
    return lambda r: (rank[r["method"]], *_param_values(r), str(r["variant"]))


def _param_values(row: pd.Series) -> tuple:
    pairs = row["variant_params"] if "variant_params" in row.index and \
        isinstance(row["variant_params"], tuple) else tuple((p, row.get(p)) for p in SWEEP_PARAMS)
    return tuple((0, float(v)) if isinstance(v, numbers.Real) and not pd.isna(v) else (1, str(v))
                 for _, v in pairs)


def variant_label(method: str, variant: str, labels: Mapping[str, str] | None = None) -> str:
    """Display label of a variant: the method's paper name plus its param text;
    "SEED (β=1)", and "SEED (full), β=1" when the name has parentheses already."""
    name = (labels or METHOD_LABELS).get(method, METHOD_LABELS.get(method, method))
    rest = variant[len(method):].strip()
    if not rest:
        return name
    if "(" in name and rest.startswith("(") and rest.endswith(")"):
        return f"{name}, {rest[1:-1]}"
    return f"{name} {rest}"


def _non_default_writer(runs: pd.DataFrame) -> list[bool]:
    """Per row: its writer.kind is known and differs from its method's own writer."""
    if "writer.kind" not in runs.columns or "method_writer" not in runs.columns:
        return [False] * len(runs)
    kind, own = runs["writer.kind"], runs["method_writer"]
    return (kind.notna() & own.notna() & (own.astype(str) != "")
            & (kind.astype(str) != own.astype(str))).tolist()


def _short(param: str) -> str:
    return param.rpartition(".")[2]


def _param_text(param: str, value) -> str:
    symbol = PARAM_SYMBOLS.get(param, _short(param))
    return f"{symbol}={format_value(value)}"


def format_value(value) -> str:
    """A param value as a label shows it: numbers to 3 significant digits (2.38611 ->
    2.39, 0.0195789 -> 0.0196, 5.0 -> 5), anything else as text."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "none"
    return f"{value:.3g}"


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
                             "0" if r["method"] == "etro" else format_value(r[param])),
                  lambda r: (rank[r["method"]], float(r[param]), str(r["variant"])))


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout("etro_table1", "Results by backbone (ETRO Table 1; %, higher is better)",
           ("grpo", "grpo_opsd", "skill_sd", "rlsd", "seed", "etro"), "grpo",
           ROLES, method_table),
    Layout("seed_ablation", "SEED ablation (SEED Table 2; %)",
           ("seed", "seed_no_sft", "seed_no_self_evolving", "seed_static"), "seed", HEADLINE,
           method_table, {"seed": "SEED (full)"}),
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
