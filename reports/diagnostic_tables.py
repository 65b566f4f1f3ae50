"""Diagnostic tables of a report: writer reliability (ETRO Table 5), value alignment (SEED
review Eq. 8), writer staleness (Eq. 14) and compute cost, one row per table row of the
paper tables (a cell: method and its swept params), statistics over seeds.

The analysis functions (:mod:`analysis.diagnostics`) compute per run and
:mod:`analysis.cells` brings their results onto cells (mean, std and the t interval over
seeds); :func:`diagnostic_table` turns that long frame into a :class:`reports.tables.Table`
(rendered to Markdown, LaTeX and JSON like the paper tables; no bold, no markers: nothing is
ranked here). The sensitivity, aggregate and recovery tables take their analysis frames
likewise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.cells import CELL_KEYS
from analysis.diagnostics import PHASES, Skipped
from analysis.stats import CI_METHODS
from reports.envs import FAMILY_ORDER
from reports.prepared import PARAM_SYMBOLS, format_value, param_symbol
from reports.style import method_rank, variant_label
from reports.tables import Cell, Column, Row, Section, Table


@dataclass(frozen=True)
class DiagnosticSpec:
    """A diagnostic table: its title, value columns (Column.key = the per-run column) and
    the sentence that says what the numbers are."""

    name: str
    title: str
    columns: tuple[Column, ...]
    note: str


WRITER = DiagnosticSpec(
    "writer_reliability", "Writer reliability on failed training trajectories (ETRO Table 5)",
    (Column("validity", "Writer", "valid output"),
     Column("boundary_acceptance", "Boundary", "accepted"),
     Column("exact_turn", "Boundary", "exact turn"),
     Column("false_boundary_rate", "Boundary", "false", higher_is_better=False),
     Column("mean_offset", "Boundary", "offset (turns)", scale=1.0, decimals=2)),
    "valid output: 1 - writer/invalid_rate over training; accepted: the writer gives a boundary "
    "when the trajectory has a true decisive error; exact turn: it names that turn; false: it "
    "gives one when there is none; offset: writer turn - true turn (%, offset in turns); --: "
    "the row's method has no writer (writer.kind none, e.g. GRPO).")
ALIGNMENT = DiagnosticSpec(
    "value_alignment", "Value alignment of the OPD gate (SEED review Eq. 8)",
    (Column("gate_mean", "Gate", "mean g", scale=1.0, decimals=3),
     Column("cov", "Cov(g, G)", "pooled", scale=1.0, decimals=4),
     Column("cov_within_state", "Cov(g, G)", "within state", scale=1.0, decimals=4),
     Column("spearman", "Spearman", "ρ(g, G)", scale=1.0, decimals=3)),
    "Per run over its scored training turns: the gate g against the discounted return G; "
    "within state: both centred within each anchor state (Eq. 8 compares actions at one "
    "context).")
STALENESS = DiagnosticSpec(
    "staleness", "Writer staleness: gate discrepancy against a refreshed writer (SEED review "
    "Eq. 14)",
    (Column("gate_discrepancy", "Gate gap", "mean |Δg|", scale=1.0, decimals=4,
            higher_is_better=False),
     Column("bound", "Eq. 14", "β/4 mean |ΔΔ|", scale=1.0, decimals=4, higher_is_better=False)),
    "Turns matched between a run and the refresh_every = 1 run of the same cell but for the "
    "writer refresh (any method name), seed and β; "
    "the two policies differ too, so the gap is staleness plus policy divergence.")
GAIN = DiagnosticSpec(
    "warm_start_gain", "Evaluation success over the warm start (before RL -> last evaluation)",
    (Column("first", "Eval success", "before RL"),
     Column("last", "Eval success", "last"),
     Column("gain", "Gain", "last - before"),
     Column("rose", "Seeds", "rose", count=True)),
    "Per seed: the evaluation at step 0 (the warm start, before any RL step) and the run's last "
    "evaluation on the same panel; gain is their paired difference (points), its interval over "
    "seeds; rose: how many of the seeds ended above their first evaluation.")


def gain_lines(cells: pd.DataFrame | Skipped) -> list[str]:
    """One sentence per table row: the gain over the warm start with its interval and n."""
    if isinstance(cells, Skipped):
        return [f"- not measured: {cells.reason}"]
    lines = []
    keys = [c for c in CELL_KEYS if c in cells.columns]

    def order(item):
        key = dict(zip(keys, item[0]))
        return (str(key.get("backbone")), str(key.get("env_label")),
                method_rank(key.get("method")), str(key.get("variant")))

    for _, part in sorted(cells.groupby(keys, sort=True), key=order):
        row = part.set_index("column")
        gain, rose = row.loc["gain"], row.loc["rose"]
        n = int(gain["n"])
        interval = (f" [{100 * gain['ci_low']:+.1f}, {100 * gain['ci_high']:+.1f}]"
                    if n > 1 and math.isfinite(gain["ci_low"]) else "")
        label = variant_label(part["method"].iloc[0], part["variant"].iloc[0])
        if "env_label" in part.columns:
            label = f"{label} ({part['env_label'].iloc[0]})"
        lines.append(f"- {label}: {100 * gain['mean']:+.1f} points"
                     f"{interval} from {100 * row.loc['first', 'mean']:.1f}% to "
                     f"{100 * row.loc['last', 'mean']:.1f}%; rose on "
                     f"{round(rose['mean'] * n)} of {n} seeds")
    return lines


def cost_spec(phases: Sequence[str]) -> DiagnosticSpec:
    return DiagnosticSpec(
        "compute_cost", "Compute cost: wall time per run by phase (s)",
        tuple(Column(f"time/{p}_s/sum", "Phase", p, scale=1.0, decimals=1,
                     higher_is_better=False) for p in phases)
        + (Column("total_s", "", "total", scale=1.0, decimals=1, higher_is_better=False),),
        "Seconds each run spent in a phase, summed over its steps (time/<phase>_s).")


def diagnostic_table(spec: DiagnosticSpec, cells: pd.DataFrame | Skipped,
                     ci: str = "t") -> Table | Skipped:
    """Rows: table rows in table order, one section per (env, backbone); columns: the
    spec's columns with data."""
    if isinstance(cells, Skipped):
        return cells
    columns = tuple(c for c in spec.columns if c.key in set(cells["column"]))
    if not columns:
        return Skipped(spec.name, "no value column has data")
    sections = []
    env = "env_label" if "env_label" in cells.columns else None
    strata = [c for c in ("backbone", env) if c]
    for keys, part in cells.groupby(strata, sort=True):
        keys = keys if isinstance(keys, tuple) else (keys,)
        rows = []
        order = part.drop_duplicates(["method", "variant"])
        order = sorted(zip(order["method"], order["variant"]),
                       key=lambda mv: (method_rank(mv[0]), mv[1]))
        for method, variant in order:
            sub = part[part["variant"] == variant].set_index("column")
            cells_of = {c.key: Cell(float(sub.at[c.key, "mean"]), float(sub.at[c.key, "std"]),
                                    int(sub.at[c.key, "n"]), ci_low=float(sub.at[c.key, "ci_low"]),
                                    ci_high=float(sub.at[c.key, "ci_high"]))
                        for c in columns
                        if c.key in sub.index and np.isfinite(sub.at[c.key, "mean"])}
            rows.append(Row((variant_label(method, variant),), cells_of))
        title = " · ".join(str(k).rpartition("/")[2] if s == "backbone" else str(k)
                           for s, k in zip(strata, keys))
        sections.append(Section(title, tuple(rows)))
    return Table(spec.name, spec.title, ("Method",), columns, tuple(sections), None,
                 notes=(spec.note,), ci_method=CI_METHODS.get(ci, ci), bold=False)


def specs(cells: dict) -> dict[str, DiagnosticSpec]:
    """The specs to render, the cost spec sized to the phases with data."""
    cost = cells.get("compute_cost")
    phases = [p for p in PHASES if isinstance(cost, pd.DataFrame)
              and f"time/{p}_s/sum" in set(cost["column"])]
    return {s.name: s for s in (GAIN, family_spec(), WRITER, ALIGNMENT, STALENESS,
                                cost_spec(phases))}


# ---------------------------------------------------------------- sensitivity


def best_table(s, best: pd.DataFrame, k: int = 5, ci: str = "t") -> Table:
    """The best ``k`` cells of a sensitivity study per (env, backbone), with their params
    and the 95% interval over seeds (cells read ``mean [low, high]``); ``best``:
    :func:`analysis.sensitivity.best_cells` of the study with that ``k``."""
    heads = tuple(param_symbol(p) for p in s.params)
    column = Column("final_success", "", "success")
    sections = []
    for (backbone, env), part in best.groupby(["backbone", "env_label"], sort=True):
        rows = tuple(Row((variant_label(s.method, s.method), *(format_value(r[p])
                                                               for p in s.params)),
                         {column.key: Cell(float(r["mean"]), float(r["std"]), int(r["n"]),
                                           ci_low=float(r["ci_low"]), ci_high=float(r["ci_high"]))})
                     for _, r in part.iterrows())
        sections.append(Section(f"{env} · {str(backbone).rpartition('/')[2]}", rows))
    kind = {"curve": "one-axis grid", "heatmap": "two-axis grid", "search": "search"}[s.kind]
    return Table(f"sensitivity_{s.method}_best",
                 f"Best {k} cells of the {kind} over {', '.join(heads)} (%)",
                 ("Method", *heads), (column,), tuple(sections), None,
                 notes=("Rows sorted by mean; values rounded to 3 significant digits.",),
                 ci_method=CI_METHODS.get(ci, ci), cell_format="ci", bold=False)


def importance_table(s, frame: pd.DataFrame) -> Table:
    """Param importances (Optuna fANOVA on the cell means), one section per env/backbone."""
    column = Column("importance", "", "importance", scale=1.0, decimals=2)
    labels = dict(zip(s.cells["env_key"], s.cells["env_label"]))
    sections = []
    for (env, backbone), part in frame.groupby(["env_key", "backbone"], sort=True):
        env = labels.get(env, env)
        part = part.sort_values("importance", ascending=False)
        rows = tuple(Row((PARAM_SYMBOLS.get(p, p),), {column.key: Cell(float(v))})
                     for p, v in zip(part["param"], part["importance"]))
        sections.append(Section(f"{env} · {str(backbone).rpartition('/')[2]}", rows))
    return Table(f"sensitivity_{s.method}_importance",
                 f"Param importance for {variant_label(s.method, s.method)} "
                 "(Optuna fANOVA evaluator, seed 0, on the cell means)",
                 ("Param",), (column,), tuple(sections), None, bold=False,
                 describe="Cells: the share of the variance of the cell means each param "
                          "explains (sums to 1 per section); few cells make it noisy.")


# ---------------------------------------------------------------- aggregates (rliable)

def aggregate_table(frame: pd.DataFrame, baseline: str = "grpo") -> Table:
    """IQM and P(improvement over the baseline) per table row, a section per backbone."""
    iqm = Column("iqm", "Across tasks", "IQM")
    poi = Column("p_improve", "Across tasks", f"P(> {variant_label(baseline, baseline)})",
                 scale=1.0, decimals=2)
    ntask = Column("n_tasks", "", "tasks", scale=1.0, decimals=0)
    sections = []
    for backbone, part in frame.groupby("backbone", sort=True):
        part = part.assign(rank=[method_rank(m) for m in part["method"]]).sort_values(
            ["rank", "variant"])
        rows = []
        for _, r in part.iterrows():
            cells = {"iqm": Cell(float(r["iqm"]), ci_low=float(r["iqm_low"]),
                                 ci_high=float(r["iqm_high"])),
                     "n_tasks": Cell(float(r["n_tasks"]))}
            if np.isfinite(r["p_improve"]):
                cells["p_improve"] = Cell(float(r["p_improve"]), ci_low=float(r["p_improve_low"]),
                                          ci_high=float(r["p_improve_high"]))
            rows.append(Row((variant_label(r["method"], r["variant"]),), cells))
        sections.append(Section(str(backbone).rpartition("/")[2], tuple(rows)))
    return Table("aggregates", "Aggregates across tasks and environments (rliable)",
                 ("Method",), (iqm, poi, ntask), tuple(sections), None, bold=False,
                 cell_format="ci", describe=(
                     "Tasks: every env and dataset column of the tables. IQM: interquartile "
                     "mean of all (seed, task) scores (%); P(>): probability that a run of the "
                     "row beats a run of the baseline on a task, averaged over shared tasks "
                     "(0.5 = no difference). Brackets: 95% stratified percentile bootstrap "
                     "(seeds resampled within each task)."))


# ---------------------------------------------------------------- per-family breakdown


def family_spec() -> DiagnosticSpec:
    return DiagnosticSpec(
        "family_breakdown", "Success by task family (SEED per-family table; %)",
        tuple(Column(f, "Family", f) for f in FAMILY_ORDER) + (Column("All", "", "All"),),
        "Last evaluation of the held-out panel; a family's rate is over its tasks.")


# ---------------------------------------------------------------- recovery (ETRO Table 6)

RECOVERY_COLUMNS = (
    Column("success", "Recovery", "Success"),
    Column("score", "Recovery", "Score"),
    Column("wrong_branch", "Wrong", "Branch", higher_is_better=False),
    Column("invalid_first", "Invalid", "first", higher_is_better=False),
    Column("entropy", "Entropy", "(nats)", scale=1.0, decimals=2),
)


def recovery_table(summary: pd.DataFrame, split: str = "") -> Table:
    """ETRO Table 6 from :func:`analysis.recovery.summarize_recovery`: one row per actor,
    cells ``mean [95% CI]`` over tasks (each task's repeats averaged first)."""
    rows = []
    for label, part in summary.groupby("label", sort=False):
        by = part.set_index("metric")
        cells = {c.key: Cell(float(by.at[c.key, "mean"]), n=int(by.at[c.key, "n_tasks"]),
                             ci_low=float(by.at[c.key, "ci_low"]),
                             ci_high=float(by.at[c.key, "ci_high"]))
                 for c in RECOVERY_COLUMNS if c.key in by.index}
        rows.append(Row((str(label),), cells))
    n_tasks = int(summary["n_tasks"].max()) if len(summary) else 0
    reps = int((summary["n_continuations"] / summary["n_tasks"].clip(lower=1)).max()) \
        if len(summary) else 0
    where = f" of {split}" if split else ""
    describe = (f"Cells: mean [95% CI] over {n_tasks} perturbed tasks{where} (Student t "
                f"interval over tasks; each task's {reps} continuations averaged first). "
                "Every actor continues from the same pre-registered, recoverable wrong action "
                "on the expert's trajectory, without hindsight skills. Success and score: "
                "the continuation's episode (%, score x 100); Wrong Branch: the first action "
                "is valid but brings the state no closer to the goal; Invalid first: the "
                "environment rejects it; Entropy: mean policy entropy over the first "
                "response's tokens.")
    return Table("recovery", "Post-error recovery (ETRO Table 6)", ("Actor",), RECOVERY_COLUMNS,
                 (Section(None, tuple(rows)),), None, describe=describe, cell_format="ci",
                 bold=False, ci_method="Student t interval over tasks")


# -- regional alignment (ETRO Fig. 1) as text ---------------------------------------------

BETWEEN_TASKS = "between tasks only: the step advantage is constant within every task"
_GAP_LABELS = {"delta_pos": "Δ+ (Positive skill)", "delta_neg": "Δ− (Negative skill)"}


def alignment_cell(row) -> tuple[str, str]:
    """One row of :func:`analysis.alignment.regional_alignment` as (value, note): rho with its
    interval, or "n/a" and the reason it is undefined (never 0); the note says when the
    correlation compares tasks only."""
    if not math.isfinite(row.rho):
        return "n/a", row.reason
    interval = (f"[{row.ci_low:+.2f}, {row.ci_high:+.2f}]" if math.isfinite(row.ci_low)
                else "[n/a: one trajectory]")
    return f"{row.rho:+.2f} {interval}", BETWEEN_TASKS if row.between_tasks_only else ""


def alignment_markdown(alignment: pd.DataFrame) -> str:
    """The regional alignment as a Markdown table (one row per method, region and gap):
    Spearman rho with the step advantage, its 95% trajectory-bootstrap interval, n turns,
    trajectories and tasks, and why a rho is n/a or what it compares."""
    frame = alignment if "method" in alignment.columns else alignment.assign(method="")
    lines = ["| method | region | gap | ρ [95% CI] | turns | trajectories | tasks | note |",
             "|---|---|---|---|---|---|---|---|"]
    for row in frame.itertuples():
        value, note = alignment_cell(row)
        lines.append(f"| {row.method} | {row.region} | {_GAP_LABELS.get(row.polarity, row.polarity)} "
                     f"| {value} | {row.n_turns} | {row.n_traj} | {row.n_tasks} | {note} |")
    return "\n".join(lines) + "\n"
