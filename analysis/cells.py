"""Per-run diagnostics brought onto cells: statistics over seeds per table row.

A cell is a row of the paper tables (a method and its swept params: the ``variant`` of the
prepared run frame, within a backbone and env). The diagnostics of :mod:`analysis.diagnostics`
and :mod:`analysis.curves` give one value per run; the functions here join each run's cell
and seed and return :func:`analysis.stats.per_cell`'s long frame

    backbone, env_label, method, variant, column, n, mean, std, ci_low, ci_high

(mean, std and the interval over seeds, runs of one seed averaged first), or the
:class:`~analysis.diagnostics.Skipped` that says what is missing. The report's diagnostic
tables (``reports.diagnostic_tables``) render these frames; each name below is the table's.

Inputs: ``runs`` is the prepared run frame (``reports.prepared.prepare_runs``: ``run_id,
seed``, the cell columns and the runs' params and metrics), ``records`` the per-turn records
of :func:`analysis.loader.load_records`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis import diagnostics
from analysis.curves import eval_gain
from analysis.diagnostics import PHASES, Skipped
from analysis.stats import per_cell

CELL_KEYS = ("backbone", "env_label", "method", "variant")
TRAIN_SPLIT = "train"  # the writer writes on training batches only
WRITER = "writer_reliability"
ALIGNMENT = "value_alignment"
STALENESS = "staleness"
GAIN = "warm_start_gain"
FAMILY = "family_breakdown"
COST = "compute_cost"
# The value columns of each table, in column order.
WRITER_COLUMNS = ("validity", "boundary_acceptance", "exact_turn", "false_boundary_rate",
                  "mean_offset")
ALIGNMENT_COLUMNS = ("gate_mean", "cov", "cov_within_state", "spearman")
STALENESS_COLUMNS = ("gate_discrepancy", "bound")
GAIN_COLUMNS = ("first", "last", "gain", "rose")
TOTAL = "total_s"


def cost_columns(phases: Sequence[str] = PHASES) -> tuple[str, ...]:
    """The per-run columns of the compute-cost table: seconds per phase, summed over steps."""
    return tuple(f"time/{p}_s/sum" for p in phases)


def cell_stats(per_run: pd.DataFrame, runs: pd.DataFrame, columns: Sequence[str],
               ci: str = "t") -> pd.DataFrame:
    """The long per-cell frame of ``per_run``'s ``columns`` (one row per run, ``run_id``),
    each run placed on its cell and seed from ``runs``."""
    keys = [c for c in CELL_KEYS if c in runs.columns]
    data = per_run.merge(runs[["run_id", "seed", *keys]], on="run_id")
    return per_cell(data, keys, list(columns), ci=ci)


def training_records(records: pd.DataFrame | None) -> pd.DataFrame | None:
    """The records of training batches (split TRAIN_SPLIT), None without records."""
    if records is not None and not records.empty and "split" in records.columns:
        return records[records["split"] == TRAIN_SPLIT]
    return None


def writer_cells(runs: pd.DataFrame, train: pd.DataFrame | None,
                 ci: str = "t") -> pd.DataFrame | Skipped:
    """ETRO Table 5 per cell: the writer's validity (1 - writer/invalid_rate) and its
    boundary rates (:func:`analysis.diagnostics.writer_reliability`). A cell whose method
    has no writer (:func:`without_writer`) gets one row with n = 0 and NaN statistics: its
    records carry no boundary (-1 on every turn), which would read 0.0 for a writer it does
    not have."""
    writer = diagnostics.writer_reliability(train, by=("run_id",)) if train is not None \
        else Skipped(WRITER, "no per-turn training records were given")
    if isinstance(writer, Skipped):
        return Skipped(WRITER, writer.reason)
    if "writer/invalid_rate/mean" in runs.columns:
        valid = 1.0 - runs.set_index("run_id")["writer/invalid_rate/mean"]
        writer = writer.assign(validity=writer["run_id"].map(valid))
    cols = [c for c in WRITER_COLUMNS if c in writer.columns]
    none = set(runs.loc[without_writer(runs), "run_id"])
    has = cell_stats(writer[~writer["run_id"].isin(none)], runs, cols, ci)
    return pd.concat([has, _empty_cells(runs[runs["run_id"].isin(none)
                                             & runs["run_id"].isin(writer["run_id"])],
                                        cols[0])], ignore_index=True)


def alignment_cells(runs: pd.DataFrame, train: pd.DataFrame | None,
                    ci: str = "t") -> pd.DataFrame | Skipped:
    """SEED review Eq. 8 per cell (:func:`analysis.diagnostics.value_alignment` per run)."""
    align = diagnostics.value_alignment(train, by=("run_id",)) if train is not None \
        else Skipped(ALIGNMENT, "no per-turn training records were given")
    return align if isinstance(align, Skipped) else cell_stats(align, runs, ALIGNMENT_COLUMNS, ci)


def without_writer(runs: pd.DataFrame) -> pd.Series:
    """Per run: it has no writer (resolved ``writer.kind`` none; without that param, its
    method's own writer, tag ``method_writer``)."""
    for column in ("writer.kind", "method_writer"):
        if column in runs.columns:
            return runs[column].astype(str) == "none"
    return pd.Series(False, index=runs.index)


def _empty_cells(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """A row per cell of ``runs`` with no value (n = 0, NaN statistics)."""
    keys = [c for c in CELL_KEYS if c in runs.columns]
    cells = runs[keys].drop_duplicates()
    return cells.assign(column=column, n=0, mean=np.nan, std=np.nan, ci_low=np.nan,
                        ci_high=np.nan).reset_index(drop=True)


def staleness_cells(runs: pd.DataFrame, train: pd.DataFrame | None, ci: str = "t", *,
                    results: Sequence[str] = ()) -> pd.DataFrame | Skipped:
    """SEED review Eq. 14 per stale cell (:func:`analysis.diagnostics.staleness`).

    ``results``: columns of ``runs`` that hold results, not config (the prepared runs'
    table metrics, "household.success"): dotted like params, they would differ between any
    two runs and keep a stale run from pairing with its refreshed one."""
    if train is None:
        return Skipped(STALENESS, "no per-turn training records were given")
    drop = set(results)
    result = diagnostics.staleness(runs.drop(columns=[c for c in runs.columns if c in drop]),
                                   train)
    if isinstance(result, Skipped):
        return result
    keys = [c for c in CELL_KEYS if c in runs.columns]
    per_run = result.groupby("run_id", as_index=False)[list(STALENESS_COLUMNS)].mean()
    cols = ["run_id", "seed", *(k for k in keys if k != "seed")]
    per_run = per_run.merge(runs[cols], on="run_id")  # the stale run's cell and seed
    if per_run.empty:
        return Skipped(STALENESS, "stale runs could not be matched to their cells")
    return per_cell(per_run, keys, list(STALENESS_COLUMNS), ci=ci)


def cost_cells(runs: pd.DataFrame, ci: str = "t") -> pd.DataFrame | Skipped:
    """Wall time per run by phase and in total (TOTAL) per cell; a phase a run did not
    log counts 0 s."""
    cols = [c for c in cost_columns() if c in runs.columns]
    if not cols:
        return Skipped(COST, "runs carry no time/<phase>_s metrics")
    data = runs.assign(**{TOTAL: runs[cols].fillna(0.0).sum(axis=1)})
    data[cols] = data[cols].fillna(0.0)
    keys = [c for c in CELL_KEYS if c in runs.columns]
    return per_cell(data, keys, [*cols, TOTAL], ci=ci)


def gain_cells(runs: pd.DataFrame, histories: pd.DataFrame, keys_of: pd.Series,
               ci: str = "t") -> pd.DataFrame | Skipped:
    """Per-cell statistics of :func:`analysis.curves.eval_gain` (the warm-start gain)."""
    gain = eval_gain(histories, keys_of)
    if gain.empty:
        return Skipped(GAIN, "no run was evaluated both at step 0 and after RL steps "
                             "(set eval.every)")
    return cell_stats(gain, runs, GAIN_COLUMNS, ci)


def family_cells(runs: pd.DataFrame, records: pd.DataFrame | None, panels: Mapping[str, str | None],
                 family_of: Callable[[str, str], str | None], families: Sequence[str],
                 ci: str = "t") -> pd.DataFrame | Skipped:
    """SEED's per-family table for household-kind runs: per run, the success rate of each
    family's tasks in its last evaluation of its held-out panel (a ``family`` column in the
    records wins over ``family_of(env, task_id)``) and over all of them (``All``), then the
    statistics over seeds per cell.

    ``panels``: run_id -> the eval split of the run's held-out panel, for the household-kind
    runs only (``reports.envs.eval_split``); ``families``: the column order."""
    name = FAMILY
    if records is None or records.empty or not {"split", "task_id", "traj"} <= set(records):
        return Skipped(name, "no per-turn evaluation records were given")
    per_run = []
    # Records are split by run once (not filtered per run: that scanned every record for
    # each of a study's runs); runs without records contribute nothing.
    by_run = dict(tuple(records.groupby("run_id", sort=False)))
    for _, run in runs[runs["run_id"].isin(list(by_run))].iterrows():
        if run["run_id"] not in panels:
            continue
        rec = by_run[run["run_id"]]
        rec = rec[rec["split"] == panels[run["run_id"]]]
        if rec.empty:
            continue
        rec = rec[rec["step"] == rec["step"].max()].drop_duplicates("traj")
        family = rec["family"] if "family" in rec.columns else \
            rec["task_id"].map(lambda t, env=run["env"]: family_of(env, t))
        rates = rec.assign(family=family).groupby("family")["success"].mean()
        per_run.append({"run_id": run["run_id"], **rates.to_dict(),
                        "All": float(rec["success"].mean())})
    if not per_run:
        return Skipped(name, "no household-kind run has evaluation records")
    frame = pd.DataFrame(per_run)
    cols = [c for c in (*families, "All") if c in frame.columns]
    return cell_stats(frame, runs, cols, ci)
