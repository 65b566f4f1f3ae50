"""Every generated table compiles with pdflatex + booktabs and fits the page."""

from __future__ import annotations

import re
import shutil
import subprocess

import pandas as pd
import pytest
from reports_fakes import fake_runs

from analysis.diagnostics import Skipped
from reports.layouts import LAYOUTS, summarize_layout
from reports.tables import Provenance, latex_document, merge_reported, to_latex

PDFLATEX = shutil.which("pdflatex")
PROV = Provenance("study_%_&_1", "abc", "2026-01-01T00:00:00+00:00")


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


@pytest.mark.skipif(PDFLATEX is None, reason="no pdflatex (Debian: texlive-latex-recommended)")
def test_every_table_compiles_and_fits_the_page(tmp_path):
    tables = _every_table()
    assert max(len(t.columns) for t in tables) == 11  # Table 1: 1 + 7 QA + avg + 2 shop
    doc = tmp_path / "tables.tex"
    doc.write_text(latex_document([to_latex(t, PROV) for t in tables]), encoding="utf-8")
    proc = subprocess.run([PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", doc.name],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    log = (tmp_path / "tables.log").read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert (tmp_path / "tables.pdf").stat().st_size > 0
    overfull = re.findall(r"Overfull \\hbox \((\d+\.\d+)pt too wide\)", log)
    assert not overfull, overfull
    assert "Missing character" not in log
    assert log.count("Output written") == 1 and f"({len(tables)} pages" in log
