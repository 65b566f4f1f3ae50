"""What a report is drawn from: the loader's frames turned into the frames the tables and
figures take, through :mod:`analysis`.

:class:`ReportInputs` holds them: the prepared run frame, one summary per table layout,
metric histories, the figures' frames, the diagnostic tables' per-cell frames, the
sensitivity studies and an optional CSV of externally reported numbers.
:meth:`ReportInputs.from_frames` computes all of them; :func:`reports.index.build_report`
only renders. This is the one module of ``reports/`` that calls ``analysis/`` to compute:
the layouts, tables and figures take its frames (as rliable's plot_utils take precomputed
estimates), so the command line can as well build the inputs itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import alignment, diagnostics
from analysis.aggregate import row_aggregates
from analysis.cells import (
    ALIGNMENT,
    COST,
    FAMILY,
    GAIN,
    STALENESS,
    WRITER,
    alignment_cells,
    cost_cells,
    family_cells,
    gain_cells,
    staleness_cells,
    training_records,
    writer_cells,
)
from analysis.curves import RATE_LIMITS, metric_curves, training_bands
from analysis.diagnostics import Skipped
from analysis.pruning import pruned_trials
from analysis.sensitivity import best_cells, importances, sensitivities
from analysis.summaries import summarize_rows
from reports.envs import FAMILY_ORDER, env_info, eval_split, task_family
from reports.layouts import LAYOUTS, Layout, layout_rows, no_metric
from reports.plans import PlanStatement
from reports.prepared import FINAL_SUCCESS, prepare_runs, success_metrics, table_metrics
from reports.style import variant_label

GATE_DELTAS = tuple(np.round(np.linspace(-1.0, 1.0, 81), 3))
DEFAULT_BETAS = (1.0, 5.0, 10.0, 20.0)
COST_BASELINE = "grpo"
BEST_K = 5  # cells of a sensitivity study's best-cells table


@dataclass(frozen=True)
class ReportInputs:
    """Frames a report is drawn from.

    ``runs``: the FINISHED runs of :func:`analysis.loader.load_runs` (their
    :func:`reports.prepared.prepare_runs` form once :meth:`from_frames` made it).
    ``summaries``: layout name -> :func:`summarize_layout` result.
    ``histories``: ``run_id, method, key, step, value`` (optionally ``env``).
    ``diagnostics``: figure name (reports.index.FIGURES) -> the analysis frame it draws
    (``training_curves``: :func:`analysis.curves.training_bands` of the histories), or a
    Skipped. ``external_csv``: reported results (see :func:`reports.tables.read_reported`).
    """

    runs: pd.DataFrame
    summaries: Mapping[str, pd.DataFrame | Skipped]
    histories: pd.DataFrame | None = None
    diagnostics: Mapping[str, pd.DataFrame | Skipped] = field(default_factory=dict)
    external_csv: Path | None = None
    # Every trial run of the study, FAILED and unfinished ones included (counted in the
    # index), the number of (cell, seed) trials the study defines (None: unknown), the
    # MLflow UI address run ids link to, and the table cell format ("std" or "ci").
    all_runs: pd.DataFrame | None = None
    expected: int | None = None
    ui_url: str | None = None
    cell_format: str = "std"
    # Diagnostic table name -> per-cell long frame (cell_frames; analysis.cells).
    diagnostic_cells: Mapping[str, pd.DataFrame | Skipped] = field(default_factory=dict)
    ci: str = "t"
    # analysis.sensitivity.sensitivities(...) of the final success, or why there is none;
    # per method of those, its BEST_K best cells and (two or more params, or a search) its
    # param importances.
    sensitivity: list | Skipped | None = None
    n_boot: int = 2000
    best_cells: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    importances: Mapping[str, pd.DataFrame | Skipped] = field(default_factory=dict)
    # analysis.aggregate.row_aggregates over every table column: (IQM / P(improvement)
    # per table row, performance profiles), or why there are none.
    aggregates: tuple[pd.DataFrame, pd.DataFrame] | Skipped | None = None
    # A study run under a ``seeds:`` plan: its rule and each cell's n and decision.
    seed_plan: PlanStatement | None = None

    @classmethod
    def from_frames(cls, runs: pd.DataFrame, *, histories: pd.DataFrame | None = None,
                    records: pd.DataFrame | None = None, external_csv: str | Path | None = None,
                    expected: int | None = None, ui_url: str | None = None,
                    cell_format: str = "std", ci: str = "t", search: bool = False,
                    n_boot: int = 2000, seed: int = 0) -> ReportInputs:
        """Summaries for every layout and the figure diagnostics, from the loader's frames.

        ``runs`` may hold runs of any status: statistics use the FINISHED ones, the index
        counts the others. ``histories`` may lack ``method`` and ``env`` (joined from
        ``runs``); ``records`` are the per-turn records (for regional alignment, computed
        per method). ``ci`` names the interval of the table cells (analysis.stats.CI_METHODS).
        """
        all_runs = runs
        if "status" in runs.columns:
            runs = runs[runs["status"] == "FINISHED"]
        runs = prepare_runs(runs)
        summaries = {name: summarize_layout(runs, layout, ci=ci, n_boot=n_boot, seed=seed)
                     for name, layout in LAYOUTS.items()}
        diags = _diagnostics(runs, records, n_boot, seed)
        cells = cell_frames(runs, records, ci)
        cells[GAIN] = Skipped(GAIN, "no metric histories were loaded")
        if histories is not None:
            join = ["run_id", *(c for c in HISTORY_JOIN
                                if c in runs.columns and c not in histories.columns)]
            histories = histories.merge(runs[join], on="run_id", how="inner")
            diags["training_curves"] = training_bands(histories)
            diags["evaluation_curves"] = evaluation_curves(runs, histories, ci)
            cells[GAIN] = gain_cells(runs, histories, eval_success_keys(runs), ci)
        found = sensitivities(runs, FINAL_SUCCESS, ci=ci, search=search)
        studies = [] if isinstance(found, Skipped) else found
        tasks = [m.key for m in table_metrics(runs) if m.role != "avg"]
        return cls(runs, summaries, histories, diags,
                   Path(external_csv) if external_csv is not None else None,
                   all_runs, expected, ui_url, cell_format, cells, ci, found, n_boot,
                   best_cells={s.method: best_cells(s, BEST_K) for s in studies},
                   importances={s.method: importances(s) for s in studies
                                if s.kind == "search" or len(s.params) > 1},
                   aggregates=row_aggregates(runs, tasks, baseline=COST_BASELINE,
                                             n_boot=n_boot))

    def figure_frames(self) -> dict[str, pd.DataFrame | Skipped | None]:
        """Figure name -> the frame it draws (None when not given)."""
        return {"training_curves": None, **self.diagnostics}

    def pruned(self) -> pd.DataFrame:
        """The search trials a pruner stopped, by step (:func:`analysis.pruning.pruned_trials`),
        over every run the report was given (finished or not)."""
        return pruned_trials(self.all_runs if self.all_runs is not None else self.runs)


def summarize_layout(runs: pd.DataFrame, layout: Layout, *, alpha: float = 0.05,
                     ci: str = "t", n_boot: int = 2000, seed: int = 0) -> pd.DataFrame | Skipped:
    """The layout's summary frame (:mod:`analysis.summaries`), from the loader's run frame
    (or its :func:`~reports.prepared.prepare_runs` form): its rows
    (:func:`reports.layouts.layout_rows`) summarised by
    :func:`analysis.summaries.summarize_rows` against the layout's baseline."""
    rows = layout_rows(runs, layout)
    if isinstance(rows, Skipped):
        return rows
    summary = summarize_rows(rows.data, rows.metrics, layout.baseline, average=rows.average,
                             alpha=alpha, ci=ci, n_boot=n_boot, seed=seed)
    return no_metric(layout, rows) if summary is None else summary


def cell_frames(runs: pd.DataFrame, records: pd.DataFrame | None,
                ci: str = "t") -> dict[str, pd.DataFrame | Skipped]:
    """Diagnostic table name -> its per-cell long frame (:mod:`analysis.cells`), or the
    Skipped that says what is missing; ``runs`` prepared, ``records`` the per-turn records."""
    train = training_records(records)
    results = [m.key for m in table_metrics(runs)] if train is not None else []
    return {
        WRITER: writer_cells(runs, train, ci),
        ALIGNMENT: alignment_cells(runs, train, ci),
        STALENESS: staleness_cells(runs, train, ci, results=results),
        FAMILY: family_cells(runs, records, family_panels(runs, records), task_family,
                             FAMILY_ORDER, ci),
        COST: cost_cells(runs, ci),
    }


def family_panels(runs: pd.DataFrame, records: pd.DataFrame | None) -> dict[str, str | None]:
    """run_id -> the eval split of its env's held-out panel (:func:`reports.envs.eval_split`
    of the metrics it logged), for the household-kind runs that have records."""
    if records is None or records.empty or "run_id" not in records.columns:
        return {}
    out = {}
    for _, run in runs[runs["run_id"].isin(set(records["run_id"]))].iterrows():
        info = env_info(run["env"])
        if info.kind == "household":
            out[run["run_id"]] = eval_split(info, [c for c in runs.columns if pd.notna(run.get(c))])
    return out


HISTORY_JOIN = ("method", "env", "env_label", "backbone", "variant", "seed")


def eval_keys(runs: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """env key -> the ``eval/<split>/success`` history keys behind its final success
    (one split; every dataset of a QA env, averaged per step)."""
    metrics = {m.key: m for m in table_metrics(runs)}
    return {env: metrics[key].source for env, key in success_metrics(list(metrics.values())).items()}


def eval_success_keys(runs: pd.DataFrame) -> pd.Series:
    """run_id -> the history keys of its evaluation success (:func:`eval_keys`)."""
    return runs.set_index("run_id")["env_key"].map(eval_keys(runs)).dropna()


def evaluation_curves(runs: pd.DataFrame, histories: pd.DataFrame,
                      ci: str = "t") -> pd.DataFrame | Skipped:
    """Evaluation success curves per table row (analysis.curves.metric_curves), intervals
    clipped to a success rate's [0, 1]."""
    keys_of = eval_success_keys(runs)
    if keys_of.empty:
        return Skipped("evaluation_curves", "runs log no evaluation success metric")
    by = ["backbone", "env_label", "method", "variant"]
    curves = metric_curves(histories[["run_id", "key", "step", "value"]], runs, keys_of,
                           by=by, ci=ci, limits=RATE_LIMITS)
    if curves.empty:
        return Skipped("evaluation_curves", "no evaluation history was logged (eval.every = 0 "
                                            "and a single final evaluation has no curve)")
    curves["label"] = [variant_label(m, v) for m, v in zip(curves["method"], curves["variant"])]
    if curves.groupby(by)["step"].nunique().max() < 2:
        return Skipped("evaluation_curves", "each run has a single evaluation step")
    return curves


def _diagnostics(runs, records, n_boot, seed) -> dict[str, pd.DataFrame | Skipped]:
    return {
        "gate_curves": _gates(runs, records, n_boot, seed),
        "regional_alignment": _by_method(partial(alignment.regional_alignment, seed=seed),
                                         "regional_alignment", runs, records),
        "delta_profile": _by_method(alignment.delta_profile, "delta_profile", runs, records),
        "compute_cost": _cost_by_row(runs),
    }


BETA = "algo.beta_opd"


def _gates(runs, records, n_boot, seed) -> diagnostics.GateFrames:
    """The gate figure's frames: the measured gate by region per table row (records joined
    to runs), final success against beta_opd for the OPD methods that vary it, and the
    formula at the study's betas."""
    opd = runs[runs["algo.lambda_opd"].fillna(0) > 0] if "algo.lambda_opd" in runs else runs
    betas = sorted(opd[BETA].dropna().unique()) if BETA in opd else []
    formula = diagnostics.gate_table(GATE_DELTAS, betas or DEFAULT_BETAS)
    if records is None or records.empty or "run_id" not in records.columns:
        by_region = Skipped("gate_by_region", "no per-turn records were given")
    else:
        joined = records.merge(runs[["run_id", "method", "variant"]], on="run_id", how="inner")
        by_region = diagnostics.gate_by_region(joined, by=("method", "variant"))
    swept = opd[opd.groupby("method")[BETA].transform("nunique") > 1] if BETA in opd else opd.iloc[:0]
    vs_beta = (diagnostics.gate_sensitivity(swept, FINAL_SUCCESS, param=BETA,
                                            by=("method", "env_label"), n_boot=n_boot, seed=seed)
               if len(swept) else Skipped(f"gate_sensitivity[{BETA}]", "no OPD method varies β"))
    if not isinstance(vs_beta, Skipped):
        vs_beta = vs_beta.rename(columns={"env_label": "env"})
    return diagnostics.GateFrames(by_region, vs_beta, formula)


def _cost_by_row(runs: pd.DataFrame) -> pd.DataFrame | Skipped:
    """Compute cost per table row (variant); the baseline is GRPO's row when it has one."""
    rows = runs.assign(method=runs["variant"]) if "variant" in runs.columns else runs
    grpo = sorted(set(rows.loc[runs["method"] == COST_BASELINE, "method"]))
    return diagnostics.compute_cost(rows, baseline=grpo[0] if len(grpo) == 1 else COST_BASELINE)


def _by_method(compute, name: str, runs, records) -> pd.DataFrame | Skipped:
    """``compute(records)`` per method (records joined to runs on run_id), rows concatenated
    with a ``method`` column; the Skipped reasons joined when no method has a frame."""
    if records is None or records.empty or "run_id" not in records.columns:
        return Skipped(name, "no per-turn records were given")
    joined = records.merge(runs[["run_id", "method"]], on="run_id", how="inner")
    parts, reasons = [], []
    for method, part in joined.groupby("method", sort=True):
        result = compute(part.drop(columns="method"))
        if isinstance(result, Skipped):
            reasons.append(f"{method}: {result.reason}")
        else:
            parts.append(result.assign(method=method))
    if not parts:
        return Skipped(name, "; ".join(reasons) or "records match no run")
    return pd.concat(parts, ignore_index=True)
