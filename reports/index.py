"""The report builder: every table and figure a study's frames allow, and an ``index.md``.

:func:`build_report` renders a :class:`~reports.inputs.ReportInputs` (the frames
:meth:`ReportInputs.from_frames` computed through :mod:`analysis`) into tables, figures,
``index.md`` and ``index.html``. Logging the written files on the study's parent run is the
caller's job (sweeps / CLI).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.diagnostics import Skipped
from analysis.stats import FEW_SEEDS, MIN_PAIRED
from reports import diagnostic_tables, figures
from reports.html import write_html
from reports.inputs import BEST_K, COST_BASELINE, ReportInputs
from reports.layouts import LAYOUTS
from reports.plans import plan_lines
from reports.style import method_labels, variant_label
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

MAX_RUN_ROWS = 200  # run list rows in index.md (every run id is in the table sidecars)


# Figure name -> drawing function; its input is ReportInputs.figure_frames()[name].
FIGURES: dict[str, Callable[..., list[Path] | Skipped]] = {
    "evaluation_curves": figures.evaluation_curves,
    "training_curves": figures.training_curves,
    "gate_curves": figures.gate_curves,
    "regional_alignment": figures.regional_alignment,
    "delta_profile": figures.delta_profile,
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
            table = merge_reported(table, reported, method_labels(layout.labels))
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
    texts = _alignment_text(frames.get("regional_alignment"), out, written)
    index = out / "index.md"
    command = regenerate or f"hindsight report --study {study_name}"
    index.write_text(_index_text(inputs, provenance, written, tables, skipped, command, out, texts),
                     encoding="utf-8")
    summary = [f"- git sha: `{provenance.git_sha}`", f"- generated: {provenance.generated_at}",
               *_run_counts(inputs)]
    write_html(out / "index.html", f"Report: {provenance.study}", summary, written, skipped,
               command, out)
    return index


def _aggregates(inputs, out, provenance, written, tables, skipped) -> None:
    """rliable aggregates across tasks: IQM / P(improvement) table, performance profiles."""
    result = Skipped("aggregates", "not computed") if inputs.aggregates is None \
        else inputs.aggregates
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
        if s.method in inputs.best_cells:
            best = diagnostic_tables.best_table(s, inputs.best_cells[s.method], BEST_K, inputs.ci)
            tables[f"table {best.name}"] = best
            written[f"table {best.name}"] = write_table(best, out / "tables" / best.name,
                                                        provenance)
        else:
            skipped.append(Skipped(f"sensitivity_{s.method}_best", "not computed"))
        if s.kind == "search" or len(s.params) > 1:
            frame = inputs.importances.get(s.method, Skipped(f"importance[{s.method}]",
                                                             "not computed"))
            if isinstance(frame, Skipped):
                skipped.append(frame)
                continue
            table = diagnostic_tables.importance_table(s, frame)
            tables[f"table {table.name}"] = table
            written[f"table {table.name}"] = write_table(table, out / "tables" / table.name,
                                                         provenance)


def _alignment_text(alignment, out: Path, written: dict[str, list[Path]]) -> dict[str, str]:
    """The regional alignment's numbers beside its figure: ``tables/regional_alignment.md``
    (rho, interval, n, and "n/a" with the reason where a rho is undefined), its text keyed by
    the figure's title for the index; {} when there is no alignment."""
    if not isinstance(alignment, pd.DataFrame) or alignment.empty:
        return {}
    text = diagnostic_tables.alignment_markdown(alignment)
    path = out / "tables" / "regional_alignment.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    title = "figure regional_alignment"
    written[title] = [*written.get(title, []), path]
    return {title: text}


def _index_text(inputs: ReportInputs, provenance, written, tables, skipped, command,
                out: Path, texts: dict[str, str]) -> str:
    lines = [f"# Report: {provenance.study}", "",
             f"- git sha: `{provenance.git_sha}`", f"- generated: {provenance.generated_at}",
             *_run_counts(inputs), *_seed_warning(inputs.runs), "", *plan_lines(inputs.seed_plan),
             "## Gain over the warm start", "",
             *diagnostic_tables.gain_lines(inputs.diagnostic_cells.get(
                 diagnostic_tables.GAIN.name, Skipped(diagnostic_tables.GAIN.name, "not computed"))),
             ""]
    for title, paths in written.items():
        links = [f"[{p.suffix[1:]}]({p.relative_to(out).as_posix()})" for p in paths if p.exists()]
        lines += [f"## {title}", "", " · ".join(links), ""]
        if title in tables:
            lines += [to_markdown(tables[title]), ""]
        if title in texts:
            lines += [texts[title], ""]
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
    pruned = inputs.pruned()
    if len(pruned):
        steps = ", ".join(f"{n} at step {s}" for s, n in zip(pruned["pruned_at"], pruned["trials"]))
        lines.append(f"- pruned search trials: {pruned['trials'].sum()} ({steps}; a trial's training "
                     "steps over its seeds), left out of the sensitivity analysis")
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
