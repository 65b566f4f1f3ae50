"""The report builder: every table and figure a study's frames allow, and an ``index.md``.

:class:`ReportInputs` holds what the report is drawn from: the loader's run frame, one summary
per table layout, metric histories, diagnostics results and an optional CSV of externally
reported numbers. :meth:`ReportInputs.from_frames` computes the summaries and diagnostics
(through :mod:`analysis`) from the loader's frames; :func:`build_report` only renders. Logging
the written files on the study's parent run is the caller's job (sweeps / CLI).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import diagnostics
from analysis.diagnostics import Skipped
from analysis.sensitivity import importances, sensitivities
from analysis.stats import FEW_SEEDS, MIN_PAIRED
from reports import diagnostic_tables, figures
from reports.html import write_html
from reports.layouts import (
    FINAL_SUCCESS,
    LAYOUTS,
    METHOD_LABELS,
    prepare_runs,
    success_metrics,
    summarize_layout,
    table_metrics,
    variant_label,
)
from reports.tables import (
    Provenance,
    Table,
    latex_document,
    merge_reported,
    read_reported,
    to_latex,
    to_markdown,
    write_table,
)

GATE_DELTAS = tuple(np.round(np.linspace(-1.0, 1.0, 81), 3))
DEFAULT_BETAS = (1.0, 5.0, 10.0, 20.0)
COST_BASELINE = "grpo"
MAX_RUN_ROWS = 200  # run list rows in index.md (every run id is in the table sidecars)


@dataclass(frozen=True)
class ReportInputs:
    """Frames a report is drawn from.

    ``runs``: the FINISHED runs of :func:`analysis.loader.load_runs` (their
    :func:`reports.layouts.prepare_runs` form once :meth:`from_frames` made it).
    ``summaries``: layout name -> :func:`reports.layouts.summarize_layout` result. ``histories``: ``run_id, method, key,
    step, value`` (optionally ``env``). ``diagnostics``: figure name (see FIGURES) -> the analysis frame it draws,
    or a Skipped. ``external_csv``: reported results (see :func:`reports.tables.read_reported`).
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
    # Diagnostic table name -> per-cell long frame (reports.diagnostic_tables.cell_frames).
    diagnostic_cells: Mapping[str, pd.DataFrame | Skipped] = field(default_factory=dict)
    ci: str = "t"
    # analysis.sensitivity.sensitivities(...) of the final success, or why there is none.
    sensitivity: list | Skipped | None = None
    n_boot: int = 2000

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
        cells = diagnostic_tables.cell_frames(runs, records, ci)
        cells[diagnostic_tables.GAIN.name] = Skipped(diagnostic_tables.GAIN.name,
                                                     "no metric histories were loaded")
        if histories is not None:
            join = ["run_id", *(c for c in HISTORY_JOIN
                                if c in runs.columns and c not in histories.columns)]
            histories = histories.merge(runs[join], on="run_id", how="inner")
            diags["evaluation_curves"] = evaluation_curves(runs, histories, ci)
            cells[diagnostic_tables.GAIN.name] = diagnostic_tables.gain_cells(
                runs, histories, eval_success_keys(runs), ci)
        return cls(runs, summaries, histories, diags,
                   Path(external_csv) if external_csv is not None else None,
                   all_runs, expected, ui_url, cell_format, cells, ci,
                   sensitivities(runs, FINAL_SUCCESS, ci=ci, search=search), n_boot)

    def figure_frames(self) -> dict[str, pd.DataFrame | Skipped | None]:
        """Figure name -> the frame it draws (None when not given)."""
        return {"training_curves": self.histories, **self.diagnostics}


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
    from analysis.curves import RATE_LIMITS, metric_curves

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
        "regional_alignment": _alignment_by_method(runs, records, seed),
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


def _alignment_by_method(runs, records, seed) -> pd.DataFrame | Skipped:
    """Regional alignment per method (records joined to runs on run_id), rows concatenated."""
    name = "regional_alignment"
    if records is None or records.empty or "run_id" not in records.columns:
        return Skipped(name, "no per-turn records were given")
    joined = records.merge(runs[["run_id", "method"]], on="run_id", how="inner")
    parts, reasons = [], []
    for method, part in joined.groupby("method", sort=True):
        result = diagnostics.regional_alignment(part.drop(columns="method"), seed=seed)
        if isinstance(result, Skipped):
            reasons.append(f"{method}: {result.reason}")
        else:
            parts.append(result.assign(method=method))
    if not parts:
        return Skipped(name, "; ".join(reasons) or "records match no run")
    return pd.concat(parts, ignore_index=True)


# Figure name -> drawing function; its input is ReportInputs.figure_frames()[name].
FIGURES: dict[str, Callable[..., list[Path] | Skipped]] = {
    "evaluation_curves": figures.evaluation_curves,
    "training_curves": figures.training_curves,
    "gate_curves": figures.gate_curves,
    "regional_alignment": figures.regional_alignment,
    "compute_cost": figures.compute_cost,
}


def build_report(inputs: ReportInputs, out_dir: str | Path, study_name: str, git_sha: str, *,
                 regenerate: str | None = None) -> Path:
    """Write every table (``tables/<layout>.md|.tex|.json``) and figure
    (``figures/<name>.png|.pdf``) the inputs allow, then ``index.md`` and the same report as
    one self-contained ``index.html`` (:mod:`reports.html`); return the ``index.md`` path.

    ``regenerate``: the command line that rebuilds this report, quoted in the index
    (default ``hindsight report --study <study_name>``).
    """
    out = Path(out_dir)
    provenance = Provenance(study_name, git_sha,
                            dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    reported = read_reported(inputs.external_csv) if inputs.external_csv is not None else None
    written: dict[str, list[Path]] = {}
    skipped: list[Skipped] = []
    tables: dict[str, Table] = {}
    for name, layout in LAYOUTS.items():
        table = layout.table(inputs.summaries.get(name, Skipped(name, "no summary computed")))
        if isinstance(table, Skipped):
            skipped.append(table)
            continue
        if reported is not None:
            table = merge_reported(table, reported, {**METHOD_LABELS, **layout.labels})
        table = replace(table, cell_format=inputs.cell_format)
        tables[f"table {name}"] = table
        written[f"table {name}"] = write_table(table, out / "tables" / name, provenance)
    for name, spec in diagnostic_tables.specs(inputs.diagnostic_cells).items():
        table = diagnostic_tables.diagnostic_table(
            spec, inputs.diagnostic_cells.get(name, Skipped(name, "not computed")), inputs.ci)
        if isinstance(table, Skipped):
            skipped.append(table)
            continue
        table = replace(table, cell_format=inputs.cell_format)
        tables[f"table {name}"] = table
        written[f"table {name}"] = write_table(table, out / "tables" / name, provenance)
    _sensitivity(inputs, out, provenance, written, tables, skipped)
    _aggregates(inputs, out, provenance, written, tables, skipped)
    if tables:
        doc = out / "tables" / "tables.tex"
        doc.write_text(latex_document([to_latex(t, provenance) for t in tables.values()]),
                       encoding="utf-8")
        written["all tables (LaTeX document: pdflatex tables.tex)"] = [doc]
    frames = inputs.figure_frames()
    for name, draw in FIGURES.items():
        result = draw(frames.get(name), out / "figures" / name)
        if isinstance(result, Skipped):
            skipped.append(result)
        else:
            written[f"figure {name}"] = result
    index = out / "index.md"
    command = regenerate or f"hindsight report --study {study_name}"
    index.write_text(_index_text(inputs, provenance, written, tables, skipped, command, out),
                     encoding="utf-8")
    summary = [f"- git sha: `{provenance.git_sha}`", f"- generated: {provenance.generated_at}",
               *_run_counts(inputs)]
    write_html(out / "index.html", f"Report: {provenance.study}", summary, written, skipped,
               command, out)
    return index


def _aggregates(inputs, out, provenance, written, tables, skipped) -> None:
    """rliable aggregates across tasks: IQM / P(improvement) table, performance profiles."""
    result = diagnostic_tables.aggregate_frames(inputs.runs, baseline=COST_BASELINE,
                                                n_boot=inputs.n_boot)
    if isinstance(result, Skipped):
        skipped.append(result)
        return
    frame, profiles = result
    table = diagnostic_tables.aggregate_table(frame, COST_BASELINE)
    tables[f"table {table.name}"] = table
    written[f"table {table.name}"] = write_table(table, out / "tables" / table.name, provenance)
    drawn = figures.performance_profiles(profiles, out / "figures" / "performance_profiles")
    if isinstance(drawn, Skipped):
        skipped.append(drawn)
    else:
        written["figure performance_profiles"] = drawn


def _sensitivity(inputs, out, provenance, written, tables, skipped) -> None:
    """Per method that varies a param it uses: the figure its kind asks for, the best
    cells with their intervals and, with two or more params, Optuna's importances."""
    found = inputs.sensitivity
    if found is None or isinstance(found, Skipped):
        skipped.append(found or Skipped("sensitivity", "not computed"))
        return
    for s in found:
        name = f"sensitivity_{s.method}"
        result = figures.sensitivity(s, out / "figures" / name)
        if isinstance(result, Skipped):
            skipped.append(result)
        else:
            written[f"figure {name}"] = result
        best = diagnostic_tables.best_table(s, ci=inputs.ci)
        tables[f"table {best.name}"] = best
        written[f"table {best.name}"] = write_table(best, out / "tables" / best.name, provenance)
        if s.kind == "search" or len(s.params) > 1:
            frame = importances(s)
            if isinstance(frame, Skipped):
                skipped.append(frame)
                continue
            table = diagnostic_tables.importance_table(s, frame)
            tables[f"table {table.name}"] = table
            written[f"table {table.name}"] = write_table(table, out / "tables" / table.name,
                                                         provenance)


def _index_text(inputs: ReportInputs, provenance, written, tables, skipped, command,
                out: Path) -> str:
    lines = [f"# Report: {provenance.study}", "",
             f"- git sha: `{provenance.git_sha}`", f"- generated: {provenance.generated_at}",
             *_run_counts(inputs), *_seed_warning(inputs.runs), "",
             "## Gain over the warm start", "",
             *diagnostic_tables.gain_lines(inputs.diagnostic_cells.get(
                 diagnostic_tables.GAIN.name, Skipped(diagnostic_tables.GAIN.name, "not computed"))),
             ""]
    for title, paths in written.items():
        links = [f"[{p.suffix[1:]}]({p.relative_to(out).as_posix()})" for p in paths if p.exists()]
        lines += [f"## {title}", "", " · ".join(links), ""]
        if title in tables:
            lines += [to_markdown(tables[title]), ""]
        png = next((p for p in paths if p.suffix == ".png" and p.exists()), None)
        if png is not None:
            lines += [f"![{title}]({png.relative_to(out).as_posix()})", ""]
    lines += ["## Skipped", ""]
    lines += [f"- {s.diagnostic}: {s.reason}" for s in skipped] or ["- nothing"]
    lines += ["", *_run_list(inputs), "## Regenerate", "", "```", command, "```", ""]
    return "\n".join(lines)


def seeds_per_cell(runs: pd.DataFrame) -> pd.Series:
    """Distinct seeds per cell (one configuration: env, backbone and variant / cell id)."""
    if runs.empty or "seed" not in runs.columns:
        return pd.Series(dtype=int)
    cell = [c for c in ("env_key", "backbone", "variant") if c in runs.columns] or \
        [c for c in ("cell_id",) if c in runs.columns]
    return runs.groupby(cell, dropna=False)["seed"].nunique() if cell else pd.Series(dtype=int)


def _run_counts(inputs: ReportInputs) -> list[str]:
    """Lines: runs by status, missing trials, distinct seeds, cells and seeds per cell."""
    runs, every = inputs.runs, inputs.all_runs if inputs.all_runs is not None else inputs.runs
    status = every["status"].value_counts() if "status" in every.columns else pd.Series(dtype=int)
    found = (every[["cell_id", "seed"]].drop_duplicates().shape[0]
             if {"cell_id", "seed"} <= set(every.columns) else len(every))
    parts = [f"{len(runs)} finished (used)"]
    parts += [f"{int(n)} {s.lower()} (not used)" for s, n in status.items() if s != "FINISHED"]
    if inputs.expected is not None:
        parts.append(f"{max(0, inputs.expected - found)} missing of {inputs.expected} "
                     "trials the study defines")
    lines = [f"- runs: {', '.join(parts)}"]
    per_cell = seeds_per_cell(runs)
    if len(per_cell):
        lines.append(f"- seeds: {runs['seed'].nunique()} distinct")
        lines.append(f"- cells: {len(per_cell)}, seeds per cell: "
                     f"{per_cell.min()}–{per_cell.max()}")
    return lines


def _seed_warning(runs: pd.DataFrame) -> list[str]:
    per_cell = seeds_per_cell(runs)
    if not len(per_cell) or per_cell.min() >= FEW_SEEDS:
        return []
    return ["", f"> **Caution: fewer than {FEW_SEEDS} seeds per cell** (n = {per_cell.min()}–"
                f"{per_cell.max()}). Intervals over so few seeds are wide; no significance "
                f"marker is drawn from fewer than {MIN_PAIRED} paired seeds."]


def run_link(run: pd.Series, ui_url: str | None) -> str:
    """The run id, linked to its page in the MLflow UI when ``ui_url`` is given."""
    rid = str(run["run_id"])
    if not ui_url:
        return f"`{rid}`"
    exp = run.get("experiment_id")
    path = f"#/experiments/{exp}/runs/{rid}" if isinstance(exp, str) and exp else f"#/runs/{rid}"
    return f"[`{rid[:12]}`]({ui_url.rstrip('/')}/{path})"


def _run_list(inputs: ReportInputs) -> list[str]:
    every = inputs.all_runs if inputs.all_runs is not None else inputs.runs
    if every.empty or "run_id" not in every.columns:
        return []
    variants = dict(zip(inputs.runs["run_id"], inputs.runs.get("variant", inputs.runs["method"])))
    lines = ["## Runs", ""]
    if inputs.ui_url:
        lines += [f"Links open the MLflow UI at {inputs.ui_url} (`hindsight ui STUDY.yaml`).", ""]
    lines += ["| run | row | env | backbone | seed | status |", "|---|---|---|---|---|---|"]
    order = every.sort_values([c for c in ("method", "env", "backbone", "seed", "run_id")
                               if c in every.columns])
    for _, run in order.head(MAX_RUN_ROWS).iterrows():
        method = str(run.get("method", ""))
        row = variant_label(method, variants.get(run["run_id"], method))
        lines.append(f"| {run_link(run, inputs.ui_url)} | {row} | {run.get('env', '')} | "
                     f"{run.get('backbone', '')} | {run.get('seed', '')} | "
                     f"{run.get('status', '')} |")
    if len(every) > MAX_RUN_ROWS:
        lines.append(f"\n{len(every) - MAX_RUN_ROWS} more runs; every run id behind a cell is "
                     "in the tables' JSON sidecars.")
    return [*lines, ""]
