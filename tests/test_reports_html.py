"""reports/html.py: index.html beside index.md, self-contained (MLflow shows HTML artifacts
in a sandboxed blob: iframe where relative paths cannot resolve)."""

from __future__ import annotations

import base64
import re

import numpy as np
from reports_fakes import fake_runs

from analysis import diagnostics
from reports.html import inline, markdown_block
from reports.index import ReportInputs, build_report
from reports.inputs import summarize_layout
from reports.layouts import LAYOUTS


def _report(tmp_path):
    runs = fake_runs({"grpo": 0.5, "etro_global_positive": 0.7, "etro": 0.8}, envs=("shop",))
    summaries = {
        name: summarize_layout(runs, layout, n_boot=100) for name, layout in LAYOUTS.items()
    }
    gates = diagnostics.GateFrames(
        diagnostics.Skipped("gate_by_region", "no records"),
        diagnostics.Skipped("gate_sensitivity", "no sweep"),
        diagnostics.gate_table(np.linspace(-1, 1, 11), (1.0, 5.0)),
    )
    out = tmp_path / "report"
    build_report(
        ReportInputs(runs, summaries, diagnostics={"gate_curves": gates}), out, "demo", "abc123"
    )
    return out


def test_index_html_embeds_every_figure_and_table(tmp_path):
    out = _report(tmp_path)
    page = (out / "index.html").read_text()
    sources = re.findall(r'src="([^"]+)"', page)
    pngs = sorted(out.glob("figures/*.png"))
    assert pngs and len(sources) == len(pngs)
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in sources}
    assert embedded == {p.read_bytes() for p in pngs}
    assert "href=" not in page  # no link that would 404 inside MLflow's iframe
    # the tables' Markdown became HTML tables with their bold/daggers and numeric alignment
    assert '<td class="num"><strong>90.0 ± 2.4</strong>†</td>' in page
    assert page.count("<table>") == len(list(out.glob("tables/*.md")))
    assert "<code>tables/etro_table1.tex</code>" in page
    assert "<code>seed_ablation</code>: no runs of methods" in page
    assert "<li>runs: 9 finished (used)" in page and "hindsight report --study demo" in page


def test_markdown_rendering_escapes_and_keeps_pipes():
    assert inline("a <b> & `x|y` **bold** *it*") == (
        "a &lt;b&gt; &amp; <code>x|y</code> <strong>bold</strong> <em>it</em>"
    )
    html = markdown_block("Caption *here*.\n\n| A | B |\n| --- | ---: |\n| x \\| y | 1.0 |\n")
    assert html.startswith("<p>Caption <em>here</em>.</p>\n<table>")
    assert '<td>x | y</td><td class="num">1.0</td>' in html
