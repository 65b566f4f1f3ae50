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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import diagnostics
from analysis.diagnostics import Skipped
from reports import figures
from reports.html import write_html
from reports.layouts import (
    FINAL_SUCCESS,
    LAYOUTS,
    METHOD_LABELS,
    summarize_layout,
    with_table_metrics,
)
from reports.tables import Provenance, merge_reported, read_reported, write_table

GATE_DELTAS = tuple(np.round(np.linspace(-1.0, 1.0, 81), 3))
DEFAULT_BETAS = (1.0, 5.0, 10.0, 20.0)
COST_BASELINE = "grpo"


@dataclass(frozen=True)
class ReportInputs:
    """Frames a report is drawn from.

    ``runs``: :func:`analysis.loader.load_runs`. ``summaries``: layout name ->
    :func:`reports.layouts.summarize_layout` result. ``histories``: ``run_id, method, key,
    step, value`` (optionally ``env``). ``diagnostics``: figure name (see FIGURES) -> the analysis frame it draws,
    or a Skipped. ``external_csv``: reported results (see :func:`reports.tables.read_reported`).
    """

    runs: pd.DataFrame
    summaries: Mapping[str, pd.DataFrame | Skipped]
    histories: pd.DataFrame | None = None
    diagnostics: Mapping[str, pd.DataFrame | Skipped] = field(default_factory=dict)
    external_csv: Path | None = None

    @classmethod
    def from_frames(cls, runs: pd.DataFrame, *, histories: pd.DataFrame | None = None,
                    records: pd.DataFrame | None = None, external_csv: str | Path | None = None,
                    n_boot: int = 2000, seed: int = 0) -> ReportInputs:
        """Summaries for every layout and the figure diagnostics, from the loader's frames.

        ``histories`` may lack ``method`` and ``env`` (joined from ``runs``); ``records`` are the
        per-turn records (for regional alignment, computed per method).
        """
        summaries = {name: summarize_layout(runs, layout, n_boot=n_boot, seed=seed)
                     for name, layout in LAYOUTS.items()}
        if histories is not None:
            join = ["run_id", *(c for c in ("method", "env") if c not in histories.columns)]
            histories = histories.merge(runs[join], on="run_id", how="inner")
        return cls(runs, summaries, histories, _diagnostics(runs, records, n_boot, seed),
                   Path(external_csv) if external_csv is not None else None)

    def figure_frames(self) -> dict[str, pd.DataFrame | Skipped | None]:
        """Figure name -> the frame it draws (None when not given)."""
        return {"training_curves": self.histories, **self.diagnostics}


def _diagnostics(runs, records, n_boot, seed) -> dict[str, pd.DataFrame | Skipped]:
    metrics = with_table_metrics(runs)
    betas = sorted(runs["algo.beta_opd"].dropna().unique()) if "algo.beta_opd" in runs else []
    return {
        "gate_sensitivity": diagnostics.gate_sensitivity(metrics, FINAL_SUCCESS, n_boot=n_boot,
                                                         seed=seed),
        "gate_curves": diagnostics.gate_table(GATE_DELTAS, betas or DEFAULT_BETAS),
        "regional_alignment": _alignment_by_method(runs, records, seed),
        "compute_cost": diagnostics.compute_cost(runs, baseline=COST_BASELINE),
    }


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
    "training_curves": figures.training_curves,
    "gate_sensitivity": figures.gate_sensitivity,
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
    for name, layout in LAYOUTS.items():
        table = layout.table(inputs.summaries.get(name, Skipped(name, "no summary computed")))
        if isinstance(table, Skipped):
            skipped.append(table)
            continue
        if reported is not None:
            table = merge_reported(table, reported, {**METHOD_LABELS, **layout.labels})
        written[f"table {name}"] = write_table(table, out / "tables" / name, provenance)
    frames = inputs.figure_frames()
    for name, draw in FIGURES.items():
        result = draw(frames.get(name), out / "figures" / name)
        if isinstance(result, Skipped):
            skipped.append(result)
        else:
            written[f"figure {name}"] = result
    index = out / "index.md"
    command = regenerate or f"hindsight report --study {study_name}"
    index.write_text(_index_text(inputs.runs, provenance, written, skipped, command, out),
                     encoding="utf-8")
    summary = [f"- git sha: `{provenance.git_sha}`", f"- generated: {provenance.generated_at}",
               *_run_counts(inputs.runs)]
    write_html(out / "index.html", f"Report: {provenance.study}", summary, written, skipped,
               command, out)
    return index


def _index_text(runs, provenance, written, skipped, command, out: Path) -> str:
    lines = [f"# Report: {provenance.study}", "",
             f"- git sha: `{provenance.git_sha}`", f"- generated: {provenance.generated_at}",
             *_run_counts(runs), "", "## Tables and figures", ""]
    for title, paths in written.items():
        links = [f"[{p.suffix[1:]}]({p.relative_to(out).as_posix()})" for p in paths if p.exists()]
        if links:
            lines.append(f"- {title}: {' · '.join(links)}")
        png = next((p for p in paths if p.suffix == ".png" and p.exists()), None)
        if png is not None:
            lines.append(f"\n  ![{title}]({png.relative_to(out).as_posix()})\n")
    lines += ["", "## Skipped", ""]
    lines += [f"- {s.diagnostic}: {s.reason}" for s in skipped] or ["- nothing"]
    lines += ["", "## Regenerate", "", "```", command, "```", ""]
    return "\n".join(lines)


def _run_counts(runs: pd.DataFrame) -> list[str]:
    """Lines: number of runs, distinct seeds, and seeds per cell (min-max)."""
    cell = ["cell_id"] if "cell_id" in runs.columns else [
        c for c in ("env", "backbone", "method") if c in runs.columns]
    lines = [f"- runs: {len(runs)}"]
    if "seed" in runs.columns and len(runs):
        per_cell = runs.groupby(cell, dropna=False)["seed"].nunique() if cell else None
        lines.append(f"- seeds: {runs['seed'].nunique()} distinct")
        if per_cell is not None:
            lines.append(f"- cells: {len(per_cell)}, seeds per cell: "
                         f"{per_cell.min()}–{per_cell.max()}")
    return lines
