"""reports/html.py: index.html beside index.md, self-contained (MLflow shows HTML artifacts
in a sandboxed blob: iframe where relative paths cannot resolve)."""

from __future__ import annotations

import base64
import re

from reports.html import inline, markdown_block
from support.reports_fakes import small_report


def test_index_html_embeds_every_figure_and_table(tmp_path):
    out = small_report(tmp_path)
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
