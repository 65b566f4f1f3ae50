"""Paper-style tables: a small table model, Markdown and LaTeX (booktabs) rendering, provenance.

A :class:`Table` is built by a layout (:mod:`reports.layouts`) from a summary frame of
:func:`analysis.stats.summarize`; this module only formats it. Conventions, stated in every
caption:

* a cell reads ``mean ± std`` over seeds (std omitted with one seed), or with
  ``cell_format="ci"`` ``mean [low, high]`` (the 95% CI the caption names), in the column's
  display units (``scale`` x the metric: success rates in %), with the number of seeds n;
  fewer than FEW_SEEDS seeds is said in the caption;
* **bold**: the best mean of the column within its section among rows with MIN_PAIRED or
  more seeds, and every row the summary marks ``not_worse_than_best`` (its Holm-corrected
  paired test against that best does not reject at alpha); a row that cannot be tested is
  not bold and does not define the best, so a table of 1-2 seeds per cell has nothing bold;
* ``†`` / ``‡``: significantly better / worse than the baseline (paired by seed,
  Holm-corrected p <= alpha, the summary's ``significant``);
* after the markers, each tested row *not shown different* from the baseline (no marker) is
  named with its minimum detectable effect (the summary's ``mde_vs_baseline``: the
  difference its paired test would have found with power 0.8), so "no marker" reads as "no
  difference of that size or more was likely missed", not as "no difference";
* ``§`` on a row label: numbers reported elsewhere (e.g. a paper), merged from a CSV by
  :func:`merge_reported`; shown as published, never bolded, never tested, and they do not
  count when finding the best of a column.

Every written table carries its provenance (study, git sha, generation time, the run ids
behind each cell) as LaTeX comments and in a JSON sidecar.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from analysis.stats import FEW_SEEDS, MIN_PAIRED

CELL_FORMATS = ("std", "ci")
MAX_LISTED = 8  # undecided cells a caption names one by one; more are summarized
WIDE_COLUMNS = 6  # a LaTeX table with more value columns spans both columns (table*)
# Shrink the tabular to the line width when it is wider, and to 0.8 of the text height (room
# for the caption) when it is taller, never enlarge it (graphicx's \resizebox measures its
# content as \width and \totalheight): no table overflows the page, however long its labels
# or however many its rows.
FIT_PAGE = (r"\resizebox*{!}{\ifdim\totalheight>0.8\textheight 0.8\textheight\else\totalheight\fi}{%",
            r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%")
BETTER = "†"
WORSE = "‡"
REPORTED = "§"
MISSING = "--"
_TEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                 "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                 "^": r"\textasciicircum{}"}
# Symbols pdflatex's default (T1/utf8) set lacks, as text-mode-safe math; every character a
# table writes beyond ASCII and Latin-1 letters must be here ("Unicode character ρ not set up").
_TEX_SYMBOLS = {BETTER: r"$^{\dagger}$", WORSE: r"$^{\ddagger}$", REPORTED: r"$^{\S}$",
                "±": r"$\pm$", "α": r"$\alpha$", "β": r"$\beta$", "γ": r"$\gamma$",
                "δ": r"$\delta$", "λ": r"$\lambda$", "ρ": r"$\rho$", "τ": r"$\tau$",
                "π": r"$\pi$", "σ": r"$\sigma$", "Δ": r"$\Delta$", "≤": r"$\le$",
                "≥": r"$\ge$", "≈": r"$\approx$", "→": r"$\to$", "−": r"$-$", "×": r"$\times$",
                "–": "--", "—": "---", "·": r"$\cdot$"}


@dataclass(frozen=True)
class Column:
    """One value column. ``key`` names the metric (``"shop.success"``) and is also the header
    of that column in a reported-results CSV; ``group`` / ``label`` are the two header rows.
    ``count``: the metric is 1 or 0 per seed and a cell reads how many of its n seeds had
    1 (``"2 of 3"``), never a percentage with a std."""

    key: str
    group: str
    label: str
    scale: float = 100.0
    higher_is_better: bool = True
    decimals: int = 1
    count: bool = False


@dataclass(frozen=True)
class Cell:
    """One value in metric units (``scale`` is applied when rendering).

    ``not_worse`` is the summary's ``not_worse_than_best``; ``marker`` is ``""``, BETTER or
    WORSE; ``run_ids`` are the runs whose values the cell aggregates (empty when reported).
    """

    mean: float
    std: float = math.nan
    n: int = 1
    not_worse: bool = False
    marker: str = ""
    run_ids: tuple[str, ...] = ()
    ci_low: float = math.nan
    ci_high: float = math.nan
    n_paired: int = 0
    diff: float = math.nan  # mean paired difference to the baseline
    p_holm: float = math.nan  # Holm-corrected p against the baseline
    p_vs_best: float = math.nan
    mde: float = math.nan  # minimum detectable effect against the baseline (metric units)


@dataclass(frozen=True)
class Row:
    """``labels``: one per label column (method, and e.g. alpha); ``cells``: column key ->
    cell, a missing key renders as MISSING. ``source`` is set on reported (external) rows."""

    labels: tuple[str, ...]
    cells: Mapping[str, Cell]
    source: str | None = None

    @property
    def reported(self) -> bool:
        return self.source is not None


@dataclass(frozen=True)
class Section:
    """Rows under one section header (a backbone); ``title`` None = no header row."""

    title: str | None
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Table:
    """A rendered-ready table. ``baseline`` is the display name of the method the markers
    compare against (None: no markers); ``alpha`` the test level."""

    name: str
    title: str
    label_headers: tuple[str, ...]
    columns: tuple[Column, ...]
    sections: tuple[Section, ...]
    baseline: str | None = None
    alpha: float = 0.05
    notes: tuple[str, ...] = field(default_factory=tuple)
    ci_method: str = "Student t interval over seeds"
    cell_format: str = "std"
    bold: bool = True  # False: a descriptive table, nothing ranked (diagnostics)
    # Replaces the caption's "Cells: ... over seeds" sentence for tables whose cells are
    # not statistics over seeds (e.g. importances).
    describe: str | None = None

    def run_ids(self) -> list[str]:
        """Every run id behind any cell, sorted."""
        return sorted({rid for _, row in self.rows() for c in row.cells.values()
                       for rid in c.run_ids})

    def rows(self) -> list[tuple[Section, Row]]:
        return [(s, r) for s in self.sections for r in s.rows]

    def seed_counts(self) -> tuple[int, int]:
        """(min, max) number of seeds n over the cells of our (non-reported) rows."""
        ns = [c.n for _, r in self.rows() if not r.reported for c in r.cells.values()]
        return (min(ns), max(ns)) if ns else (0, 0)


def significance_marker(significant: bool, diff: float, higher_is_better: bool = True) -> str:
    """BETTER / WORSE when ``significant`` and ``diff`` (row minus baseline) points that way."""
    if not significant or not math.isfinite(diff) or diff == 0:
        return ""
    return BETTER if (diff > 0) == higher_is_better else WORSE


def bold_cells(table: Table) -> set[tuple[int, int, str]]:
    """(section index, row index, column key) of every bold cell.

    Within a section and column: the best mean over our rows with MIN_PAIRED or more seeds
    (ties all bold) and every row whose cell is ``not_worse``. Rows with fewer seeds and
    reported rows are never bold and never define the best.
    """
    out = set()
    if not table.bold:
        return out
    for si, section in enumerate(table.sections):
        for col in table.columns:
            ours = [(ri, r.cells[col.key]) for ri, r in enumerate(section.rows)
                    if not r.reported and col.key in r.cells
                    and math.isfinite(r.cells[col.key].mean)
                    and r.cells[col.key].n >= MIN_PAIRED]
            if not ours:
                continue
            sign = 1.0 if col.higher_is_better else -1.0
            best = max(sign * c.mean for _, c in ours)
            out |= {(si, ri, col.key) for ri, c in ours if c.not_worse or sign * c.mean == best}
    return out


def cell_text(cell: Cell | None, column: Column, cell_format: str = "std") -> str:
    """``"79.1 ± 1.2"`` (``std``) or ``"79.1 [76.2, 82.0]"`` (``ci``) in display units;
    just the mean without a std / CI; ``"2 of 3"`` in a count column; MISSING for None."""
    if cell_format not in CELL_FORMATS:
        raise ValueError(f"cell_format={cell_format!r}; valid: {list(CELL_FORMATS)}")
    if cell is None or not math.isfinite(cell.mean):
        return MISSING
    if column.count:
        return f"{round(cell.mean * cell.n)} of {cell.n}"
    fmt = f"{{:.{column.decimals}f}}"
    text = fmt.format(cell.mean * column.scale)
    if cell_format == "ci" and math.isfinite(cell.ci_low) and math.isfinite(cell.ci_high):
        text += f" [{fmt.format(cell.ci_low * column.scale)}, " \
                f"{fmt.format(cell.ci_high * column.scale)}]"
    elif cell_format == "std" and math.isfinite(cell.std):
        text += " ± " + fmt.format(cell.std * column.scale)
    return text


def caption(table: Table) -> str:
    """Plain-text caption: what a cell is, n seeds, the bold rule, markers and footnotes."""
    low, high = table.seed_counts()
    n = f"n = {low}" if low == high else f"n = {low}–{high}"
    what = ("mean ± std over seeds" if table.cell_format == "std"
            else f"mean [95% CI] over seeds, {table.ci_method}")
    parts = [f"{table.title}.", f"Cells: {what} ({n} seeds per cell)."]
    if table.describe is not None:
        parts[1:] = [table.describe]
    elif table.cell_format == "std":
        parts.append(f"95% CIs ({table.ci_method}) and p-values are in the JSON sidecar.")
    if 0 < low < FEW_SEEDS and table.describe is None:
        parts.append(f"Caution: fewer than {FEW_SEEDS} seeds per cell; intervals are wide"
                     + (f" and tests need {MIN_PAIRED} or more paired seeds." if table.bold
                        else "."))
    if table.bold:
        parts.append(f"Bold: best in its column within a section among rows with {MIN_PAIRED} "
                     "or more seeds, and every row not significantly worse than it (paired "
                     f"test over seeds, Holm-corrected, α = {table.alpha:g}); rows with fewer "
                     f"than {MIN_PAIRED} paired seeds are not tested, not bold and not ranked.")
    if table.baseline is not None:
        parts.append(f"{BETTER} / {WORSE}: significantly better / worse than "
                     f"{table.baseline} (paired by seed, Holm-corrected p ≤ {table.alpha:g}; "
                     f"only with {MIN_PAIRED} or more paired seeds).")
        undecided = not_shown_different(table)
        if undecided:
            parts.append(f"Not shown different from {table.baseline}, with the smallest "
                         "difference each comparison would have found (power 0.8, paired t at "
                         f"Holm's first step): {_listed(undecided)}.")
    sources = sorted({r.source for _, r in table.rows() if r.reported})
    if sources:
        parts.append(f"{REPORTED}: reported by {', '.join(sources)}; not reproduced here, "
                     "shown as published, not bolded and not tested.")
    return " ".join([*parts, *table.notes])


def _listed(undecided: list[tuple[str, float, int]]) -> str:
    """The caption's list of undecided cells; past MAX_LISTED their count and range (LaTeX sets a
    caption on one line first: a list over every cell of a wide table overflows TeX)."""
    if len(undecided) <= MAX_LISTED:
        return "; ".join(f"{name} ± {value:.{decimals}f}" for name, value, decimals in undecided)
    _, values, decimals = zip(*undecided)
    return (f"{len(undecided)} cells, from ± {min(values):.{max(decimals)}f} to ± "
            f"{max(values):.{max(decimals)}f} (each cell's is mde_vs_baseline in the JSON sidecar)")


def not_shown_different(table: Table) -> list[tuple[str, float, int]]:
    """Per tested cell without a marker, ``(name, mde, decimals)`` in display units
    (``("SEED", 5.1, 1)``); the name says the column and section where the table has several."""
    several = len(table.columns) > 1
    sections = len(table.sections) > 1
    out = []
    for section, row in table.rows():
        for col in table.columns:
            cell = row.cells.get(col.key)
            if row.reported or cell is None or cell.marker or not math.isfinite(cell.mde):
                continue
            where = [f"{col.group} {col.label}".strip()] if several else []
            where += [str(section.title)] if sections and section.title else []
            label = " ".join(x for x in row.labels if x)
            out.append((f"{label}{' (' + ', '.join(where) + ')' if where else ''}",
                        cell.mde * col.scale, col.decimals))
    return out


# ---------------------------------------------------------------- reported rows


def read_reported(path: str | Path, default_table: str = "etro_table1") -> pd.DataFrame:
    """The reported-results CSV: columns ``method``, ``backbone``, ``source``, optional
    ``table`` (the layout a row belongs to; blank or absent = ``default_table``) and one
    column per metric key, values in the table's display units (e.g. percent, as papers
    print them). Raises ValueError naming missing columns."""
    frame = pd.read_csv(path)
    missing = [c for c in ("method", "backbone", "source") if c not in frame.columns]
    if missing:
        raise ValueError(f"reported CSV {str(path)!r} lacks columns {missing}; "
                         f"has {list(frame.columns)}")
    table = frame["table"] if "table" in frame.columns else pd.Series(pd.NA, index=frame.index)
    return frame.assign(table=table.fillna(default_table))


def merge_reported(table: Table, reported: pd.DataFrame,
                   labels: Mapping[str, str] | None = None) -> Table:
    """``table`` with the ``reported`` rows for its columns placed first in each backbone section.

    Rows whose ``table`` column (when present) names another table, or with no value in any
    of the table's columns, are ignored; a backbone without a section gets a new one at the end.
    Values are converted back to metric units (divided by the column's scale).
    """
    if "table" in reported.columns:
        reported = reported[reported["table"] == table.name]
    labels = labels or {}
    extra: dict[str, list[Row]] = {}
    for _, rec in reported.iterrows():
        cells = {c.key: Cell(float(rec[c.key]) / c.scale, n=0) for c in table.columns
                 if c.key in rec.index and pd.notna(rec[c.key])}
        if cells:
            name = labels.get(rec["method"], str(rec["method"]))
            pad = ("",) * (len(table.label_headers) - 1)
            row = Row((name, *pad), cells, source=str(rec["source"]))
            extra.setdefault(str(rec["backbone"]), []).append(row)
    sections = [replace(s, rows=(*extra.pop(str(s.title), []), *s.rows)) for s in table.sections]
    sections += [Section(title, tuple(rows)) for title, rows in extra.items()]
    return replace(table, sections=tuple(sections))


# ---------------------------------------------------------------- Markdown


def to_markdown(table: Table) -> str:
    """A pipe table under a bold title line and the caption; section titles as italic rows."""
    bold = bold_cells(table)
    width = len(table.label_headers) + len(table.columns)
    header = [*table.label_headers, *(f"{c.group} {c.label}".strip() for c in table.columns)]
    lines = [f"**Table: {_md(table.name)}.** {_md(caption(table))}", "",
             _md_row([_md(h) for h in header]),
             _md_row(["---"] * len(table.label_headers) + ["---:"] * len(table.columns))]
    for si, section in enumerate(table.sections):
        if section.title is not None:
            lines.append(_md_row([f"*{_md(section.title)}*"] + [""] * (width - 1)))
        for ri, row in enumerate(section.rows):
            labels = [_md(x) for x in row.labels]
            labels[0] += REPORTED if row.reported else ""
            values = [_md_cell(row, c, (si, ri, c.key) in bold, table.cell_format)
                      for c in table.columns]
            lines.append(_md_row(labels + values))
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", r"\|")


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_cell(row: Row, column: Column, bold: bool, cell_format: str = "std") -> str:
    cell = row.cells.get(column.key)
    text = cell_text(cell, column, cell_format)
    if bold:
        text = f"**{text}**"
    return text + (cell.marker if cell is not None and text != MISSING else "")


# ---------------------------------------------------------------- LaTeX


def tex_escape(text: str) -> str:
    """Escape LaTeX specials (``_ % & $ # { } ~ ^ \\``), then map the symbols we use
    († ‡ § ± Greek letters ≤ ≥ – · ...; :data:`_TEX_SYMBOLS`) to commands pdflatex has."""
    out = "".join(_TEX_SPECIALS.get(ch, ch) for ch in str(text))
    for symbol, command in _TEX_SYMBOLS.items():
        out = out.replace(symbol, command)
    return out


def to_latex(table: Table, provenance: Provenance | None = None) -> str:
    """A booktabs ``table`` float: \\toprule, a grouped header with \\cmidrule, \\midrule
    per section, \\bottomrule; provenance as ``%`` comments at the top. Needs ``booktabs``
    and ``graphicx``: the tabular is shrunk to the page when wider or taller (FIT_PAGE), so
    it never overflows it; a table with more than WIDE_COLUMNS value columns is a
    ``table*`` (both columns of a two-column paper)."""
    bold = bold_cells(table)
    n_labels, width = len(table.label_headers), len(table.label_headers) + len(table.columns)
    wide = len(table.columns) > WIDE_COLUMNS
    env = "table*" if wide else "table"
    lines = [*_tex_provenance(table, provenance),
             rf"\begin{{{env}}}[t]", r"\centering", r"\small",
             rf"\caption{{{tex_escape(caption(table))}}}", rf"\label{{tab:{table.name}}}",
             *FIT_PAGE,
             rf"\begin{{tabular}}{{{'l' * n_labels}{'c' * len(table.columns)}}}", r"\toprule",
             *_tex_header(table), r"\midrule"]
    for si, section in enumerate(table.sections):
        if si:
            lines.append(r"\midrule")
        if section.title is not None:
            lines.append(rf"\multicolumn{{{width}}}{{l}}{{\textit{{{tex_escape(section.title)}}}}} \\")
        for ri, row in enumerate(section.rows):
            labels = [tex_escape(x) for x in row.labels]
            labels[0] += _TEX_SYMBOLS[REPORTED] if row.reported else ""
            values = [_tex_cell(row, c, (si, ri, c.key) in bold, table.cell_format)
                      for c in table.columns]
            lines.append(" & ".join(labels + values) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}}", rf"\end{{{env}}}"]
    return "\n".join(lines) + "\n"


def _tex_header(table: Table) -> list[str]:
    """Group row with \\multicolumn + \\cmidrule over runs of equal groups, then labels."""
    n_labels = len(table.label_headers)
    runs: list[tuple[str, int]] = []
    for col in table.columns:
        if runs and runs[-1][0] == col.group:
            runs[-1] = (col.group, runs[-1][1] + 1)
        else:
            runs.append((col.group, 1))
    groups, rules, start = [""] * n_labels, [], n_labels + 1
    for group, span in runs:
        groups.append(rf"\multicolumn{{{span}}}{{c}}{{{tex_escape(group)}}}")
        rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
        start += span
    labels = [tex_escape(h) for h in table.label_headers]
    labels += [tex_escape(c.label) for c in table.columns]
    return [" & ".join(groups) + r" \\", " ".join(rules), " & ".join(labels) + r" \\"]


def _tex_cell(row: Row, column: Column, bold: bool, cell_format: str = "std") -> str:
    cell = row.cells.get(column.key)
    plain = cell_text(cell, column, cell_format)
    text = tex_escape(plain)
    if bold:
        text = rf"\textbf{{{text}}}"
    return text + (tex_escape(cell.marker) if cell is not None and plain != MISSING else "")


# ---------------------------------------------------------------- provenance and files


@dataclass(frozen=True)
class Provenance:
    """Where a table comes from: the study, the code version and when it was generated."""

    study: str
    git_sha: str
    generated_at: str


def provenance_record(table: Table, provenance: Provenance) -> dict:
    """The JSON sidecar: table name, study, git sha, time, all run ids and per-cell run ids."""
    cells = []
    for section, row in table.rows():
        for key, cell in row.cells.items():
            cells.append({"section": section.title, "row": " ".join(x for x in row.labels if x),
                          "column": key, "n": cell.n, "mean": _json_float(cell.mean),
                          "std": _json_float(cell.std), "ci_low": _json_float(cell.ci_low),
                          "ci_high": _json_float(cell.ci_high), "n_paired": cell.n_paired,
                          "diff_vs_baseline": _json_float(cell.diff),
                          "p_holm_vs_baseline": _json_float(cell.p_holm),
                          "mde_vs_baseline": _json_float(cell.mde),
                          "p_holm_vs_best": _json_float(cell.p_vs_best),
                          "marker": cell.marker, "run_ids": list(cell.run_ids),
                          "reported_by": row.source})
    return {"table": table.name, "title": table.title, "caption": caption(table),
            "ci_method": table.ci_method, "baseline": table.baseline, "alpha": table.alpha,
            "study": provenance.study,
            "git_sha": provenance.git_sha, "generated_at": provenance.generated_at,
            "run_ids": table.run_ids(), "cells": cells}


def write_table(table: Table, stem: str | Path, provenance: Provenance) -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.tex`` and ``<stem>.json``; return the three paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".md"), stem.with_suffix(".tex"), stem.with_suffix(".json")]
    paths[0].write_text(to_markdown(table), encoding="utf-8")
    paths[1].write_text(to_latex(table, provenance), encoding="utf-8")
    record = provenance_record(table, provenance)
    paths[2].write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return paths


LATEX_PREAMBLE = (r"\documentclass{article}", r"\usepackage[margin=2.5cm]{geometry}",
                  r"\usepackage{booktabs}", r"\usepackage{graphicx}")


def latex_document(bodies: Sequence[str]) -> str:
    """A standalone article holding the given ``to_latex`` outputs (one float per page):
    ``pdflatex`` compiles it with booktabs and graphicx (Debian texlive-latex-recommended)."""
    parts = [*LATEX_PREAMBLE, r"\begin{document}"]
    for body in bodies:
        parts += [body, r"\clearpage"]
    return "\n".join([*parts, r"\end{document}"]) + "\n"


def _tex_provenance(table: Table, provenance: Provenance | None) -> list[str]:
    if provenance is None:
        return []
    ids = table.run_ids()
    lines = [f"% table: {table.name}", f"% study: {provenance.study}",
             f"% git_sha: {provenance.git_sha}", f"% generated_at: {provenance.generated_at}",
             f"% runs ({len(ids)}), per-cell run ids in {table.name}.json:"]
    lines += ["%   " + " ".join(ids[i:i + 4]) for i in range(0, len(ids), 4)]
    return [line.replace("\n", " ") for line in lines]


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
