"""Every generated table compiles with plain pdflatex (booktabs, graphicx) and fits the page.

pdflatex comes from Debian's texlive-latex-recommended (``.ci/run`` installs it). Without it
these tests skip here and fail in CI (the ``CI`` environment variable set), so that a CI
run never passes without having compiled the tables.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pandas as pd
import pytest

from analysis.diagnostics import Skipped
from reports import diagnostic_tables, figures, index
from reports.inputs import summarize_layout
from reports.layouts import LAYOUTS
from reports.tables import Provenance, latex_document, merge_reported, to_latex
from support.reports_fakes import every_diagnostic, fake_runs

PROV = Provenance("study_%_&_1", "abc", "2026-01-01T00:00:00+00:00")


def _pdflatex() -> str:
    """The pdflatex command; a skip without it, a failure in CI."""
    path = shutil.which("pdflatex")
    if path is None:
        reason = "no pdflatex (Debian: apt-get install texlive-latex-recommended)"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"{reason}; CI must compile the tables (.ci/run installs it)")
        pytest.skip(reason)
    return path


def _compile(tmp_path, name: str) -> str:
    """pdflatex ``name`` in ``tmp_path``; asserts it compiled with no overfull box, no missing
    glyph and no float too large; returns the log."""
    proc = subprocess.run([_pdflatex(), "-interaction=nonstopmode", "-halt-on-error", name],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    log = (tmp_path / name).with_suffix(".log").read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert (tmp_path / name).with_suffix(".pdf").stat().st_size > 0
    overfull = re.findall(r"Overfull \\[hv]box \(\d+\.\d+pt too \w+\).*\n.*", log)
    assert not overfull, overfull
    for problem in ("Missing character", "Float too large", "Unicode character"):
        assert problem not in log, log[log.index(problem) - 500:][:1500]
    return log


def _every_table():
    """Runs feeding every layout: all envs, two backbones, every method, an alpha sweep and
    a swept beta, 3 seeds; plus a reported row."""
    methods = {m: 0.4 + 0.01 * i for i, m in enumerate(dict.fromkeys(
        m for layout in LAYOUTS.values() for m in layout.methods))}
    parts = [fake_runs(methods, envs=("household", "searchqa", "shop"),
                       backbones=("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"))]
    for alpha in (0.25, 0.5):
        part = fake_runs({"etro_suffix_positive": 0.6, "etro_suffix_negative": 0.55},
                         envs=("shop",), params={m: {"algo.suffix_weight": alpha} for m in
                                                 ("etro_suffix_positive", "etro_suffix_negative")})
        part["run_id"] += f"-a{alpha}"
        part["cell_id"] += f"-a{alpha}"
        parts.append(part)
    runs = pd.concat(parts, ignore_index=True)
    reported = pd.DataFrame([{"method": "icsd", "backbone": "Qwen/Qwen2.5-7B-Instruct",
                              "shop.success": 75.8, "source": "ETRO Table 1 & co_2"}])
    # a layout of its own envs (SEED's multimodal table) reads runs of those envs
    multimodal = fake_runs(methods, envs=("sokoban", "ezpoints"), backbones=("Qwen/Qwen2.5-VL-3B-Instruct",),
                           params={m: {"env.images": True} for m in methods})
    tables = []
    for layout in LAYOUTS.values():
        table = layout.table(summarize_layout(multimodal if layout.envs else runs, layout, n_boot=50))
        assert not isinstance(table, Skipped), table
        tables.append(merge_reported(table, reported))
    return tables


def test_every_table_compiles_and_fits_the_page(tmp_path):
    _pdflatex()
    tables = _every_table()
    assert max(len(t.columns) for t in tables) == 11  # Table 1: 1 + 7 QA + avg + 2 shop
    doc = tmp_path / "tables.tex"
    doc.write_text(latex_document([to_latex(t, PROV) for t in tables]), encoding="utf-8")
    log = _compile(tmp_path, doc.name)
    assert log.count("Output written") == 1 and f"({len(tables)} pages" in log


def test_every_generated_tex_compiles_on_a_store_with_every_diagnostic(tmp_path, monkeypatch):
    """A report of runs shaped like the papers' studies with every diagnostic present
    (:func:`reports_fakes.every_diagnostic`: value alignment's ρ, ETRO's suffix table with
    its alpha rows, writer reliability, staleness, families, sensitivity, aggregates): every
    .tex file it writes compiles (each is in tables.tex as it is, and pdflatex compiles that),
    with no overfull box, no float taller than the page and no missing glyph."""
    _pdflatex()
    # the figures are not under test here, and drawing them is most of a report's time
    monkeypatch.setattr(index, "FIGURES", {})
    for kind in (figures.curves, figures.studies):  # performance profiles, sensitivity
        monkeypatch.setattr(kind, "save", lambda fig, stem: [])
    runs, records, histories = every_diagnostic(backbones=("Qwen/Qwen2.5-7B-Instruct",))
    inputs = index.ReportInputs.from_frames(runs, records=records, histories=histories,
                                            n_boot=20)
    out = tmp_path / "report"
    index.build_report(inputs, out, PROV.study, PROV.git_sha)
    tables = out / "tables"
    written = sorted(p.stem for p in tables.glob("*.tex") if p.stem != "tables")
    want = {*LAYOUTS, *diagnostic_tables.specs(inputs.diagnostic_cells), "aggregates",
            "sensitivity_seed_best", "sensitivity_seed_importance"}
    assert want <= set(written), sorted(want - set(written))
    assert "ρ" in (tables / "value_alignment.md").read_text()  # the symbol pdflatex lacks
    # tables.tex holds every table file as it is (what a paper inputs), a page each
    document = (tables / "tables.tex").read_text(encoding="utf-8")
    for name in written:
        assert (tables / f"{name}.tex").read_text(encoding="utf-8") in document, name
    log = _compile(tables, "tables.tex")
    assert f"({len(written)} pages" in log
