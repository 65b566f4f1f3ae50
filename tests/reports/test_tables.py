"""Table model and rendering: bolding, markers, Markdown shape, LaTeX structure, reported rows,
provenance. Summaries are constructed by hand so every expected mark is known."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest

from reports.layouts import LAYOUTS
from reports.tables import (
    BETTER,
    MAX_LISTED,
    REPORTED,
    WORSE,
    Cell,
    Column,
    Provenance,
    Row,
    Section,
    Table,
    bold_cells,
    caption,
    merge_reported,
    not_shown_different,
    provenance_record,
    read_reported,
    significance_marker,
    tex_escape,
    to_latex,
    to_markdown,
    write_table,
)

PROV = Provenance("study_1", "0123abc", "2026-01-01T00:00:00+00:00")


def _summary_row(method, mean, *, not_worse, significant=False, diff=math.nan,
                 metric="shop.success", backbone="qwen_1.5b"):
    return {"env": "shop", "backbone": backbone, "variant": method, "method": method,
            "metric": metric, "n": 3, "mean": mean, "std": 0.02, "ci_low": mean - 0.02,
            "ci_high": mean + 0.02, "n_paired": 3, "diff_vs_baseline": diff,
            "p_vs_baseline": 0.01 if significant else 0.5, "p_holm": 0.02 if significant else 0.9,
            "significant": significant, "not_worse_than_best": not_worse,
            "run_ids": tuple(f"{method}-{s}" for s in range(3))}


@pytest.fixture
def branches():
    """ETRO Table 2 layout: grpo baseline 62.0; etro best 80.8; global positive not
    significantly worse than etro; global negative significantly worse than grpo."""
    summary = pd.DataFrame([
        _summary_row("grpo", 0.620, not_worse=False),
        _summary_row("etro_global_positive", 0.772, not_worse=True, significant=True, diff=0.152),
        _summary_row("etro_global_negative", 0.600, not_worse=False, significant=True, diff=-0.02),
        _summary_row("etro", 0.808, not_worse=True, significant=True, diff=0.188),
    ])
    return LAYOUTS["etro_branches"].table(summary)


def _labels(table, cells):
    return {(table.sections[si].rows[ri].labels[0], key) for si, ri, key in cells}


def test_bold_is_best_and_not_worse_than_best(branches):
    assert [r.labels[0] for r in branches.sections[0].rows] == [
        "GRPO", "Global Positive", "Global Negative", "ETRO"]
    assert _labels(branches, bold_cells(branches)) == {("ETRO", "shop.success"),
                                                       ("Global Positive", "shop.success")}


def test_column_best_is_bold_even_without_the_flag():
    col = Column("x.y", "X", "Y")
    rows = (Row(("a",), {"x.y": Cell(0.5, n=3)}), Row(("b",), {"x.y": Cell(0.7, n=3)}),
            Row(("c",), {"x.y": Cell(0.7, n=4)}), Row(("d",), {"x.y": Cell(0.9, n=2)}))
    table = Table("t", "T", ("Method",), (col,), (Section(None, rows),))
    # ties are all bold; the 2-seed row's higher mean is neither bold nor the best
    assert bold_cells(table) == {(0, 1, "x.y"), (0, 2, "x.y")}
    lower = Table("t", "T", ("Method",), (Column("x.y", "X", "Y", higher_is_better=False),),
                  (Section(None, rows),))
    assert bold_cells(lower) == {(0, 0, "x.y")}


def test_nothing_is_bold_when_no_row_has_enough_seeds():
    col = Column("x.y", "X", "Y")
    rows = (Row(("a",), {"x.y": Cell(0.5)}), Row(("b",), {"x.y": Cell(0.7, n=2)}))
    table = Table("t", "T", ("Method",), (col,), (Section(None, rows),))
    assert bold_cells(table) == set()
    assert "not ranked" in caption(table)


@pytest.mark.parametrize("significant, diff, higher, expected", [
    (True, 0.1, True, BETTER), (True, -0.1, True, WORSE), (False, 0.1, True, ""),
    (True, 0.1, False, WORSE), (True, -0.1, False, BETTER), (True, math.nan, True, ""),
])
def test_significance_marker(significant, diff, higher, expected):
    assert significance_marker(significant, diff, higher) == expected


def test_markdown_cells_and_shape(branches):
    text = to_markdown(branches)
    lines = [line for line in text.splitlines() if line.startswith("|")]
    pipes = {len(re.findall(r"(?<!\\)\|", line)) for line in lines}
    assert pipes == {1 + 1 + 1}  # one label column, one value column
    assert lines[1] == "| --- | ---: |"
    assert "| GRPO | 62.0 ± 2.0 |" in lines
    assert "| Global Positive | **77.2 ± 2.0**† |" in lines
    assert "| Global Negative | 60.0 ± 2.0‡ |" in lines
    assert "| ETRO | **80.8 ± 2.0**† |" in lines
    assert "| *qwen_1.5b* |  |" in lines
    assert "n = 3 seeds" in text and "than GRPO" in text


def test_latex_is_structurally_sound(branches):
    tex = to_latex(branches, PROV)
    body = [line for line in tex.splitlines() if not line.startswith("%")]
    joined = "\n".join(body)
    stripped = joined.replace(r"\{", "").replace(r"\}", "")
    depth = 0
    for ch in stripped:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0
    order = [joined.index(rule) for rule in (r"\toprule", r"\midrule", r"\bottomrule")]
    assert order == sorted(order) and joined.count(r"\bottomrule") == 1
    assert r"\label{tab:etro_branches}" in joined  # label names may hold a raw _
    # the tabular sits in boxes that shrink it to the page (a line-end % ends their opening)
    assert joined.count("{%\n") == 2 and r"\end{tabular}}}" in joined
    text = joined.replace(r"\label{tab:etro_branches}", "").replace("{%\n", "{\n")
    assert re.search(r"(?<!\\)[_%]", text) is None  # every other _ and % escaped
    assert r"qwen\_1.5b" in joined and r"Table 2; \%" in joined
    assert r"\textbf{80.8 $\pm$ 2.0}$^{\dagger}$" in joined
    assert r"60.0 $\pm$ 2.0$^{\ddagger}$" in joined
    assert "\\begin{tabular}{lc}" in joined
    rows = [line for line in body if line.endswith(r"\\") and "multicolumn" not in line]
    assert all(line.count("&") == 1 for line in rows)


def test_tex_escape_specials():
    assert tex_escape("a_b 5% #1 $x {y} ~ ^ \\") == (
        r"a\_b 5\% \#1 \$x \{y\} \textasciitilde{} \textasciicircum{} \textbackslash{}")
    assert tex_escape("± α") == r"$\pm$ $\alpha$"


def test_reported_rows_are_marked_and_never_bold(branches, tmp_path):
    pd.DataFrame([
        {"method": "icsd", "backbone": "qwen_1.5b", "shop.success": 95.0, "source": "ICSD paper"},
        {"method": "opid", "backbone": "qwen_7b", "shop.success": 79.7, "source": "OPID paper"},
        {"method": "seed", "backbone": "qwen_1.5b", "shop.success": 99.0, "source": "elsewhere",
         "table": "seed_ablation"},
        {"method": "x", "backbone": "qwen_1.5b", "household.success": 50.0, "source": "n/a"},
    ]).to_csv(tmp_path / "reported.csv", index=False)
    reported = read_reported(tmp_path / "reported.csv", default_table="etro_branches")
    table = merge_reported(branches, reported, {"icsd": "ICSD", "opid": "OPID"})
    first = table.sections[0].rows
    assert [r.labels[0] for r in first] == ["ICSD", "GRPO", "Global Positive",
                                            "Global Negative", "ETRO"]
    assert first[0].reported and first[0].cells["shop.success"].mean == pytest.approx(0.95)
    assert table.sections[1].title == "qwen_7b" and table.sections[1].rows[0].reported
    bold = _labels(table, bold_cells(table))
    assert bold == {("ETRO", "shop.success"), ("Global Positive", "shop.success")}
    text = to_markdown(table)
    assert f"| ICSD{REPORTED} | 95.0 |" in text
    assert "reported by ICSD paper, OPID paper" in text
    assert r"ICSD$^{\S}$ & 95.0 \\" in to_latex(table)


def test_write_table_provenance(branches, tmp_path):
    paths = write_table(branches, tmp_path / "tables" / "etro_branches", PROV)
    assert [p.suffix for p in paths] == [".md", ".tex", ".json"]
    record = json.loads(paths[2].read_text())
    assert record["table"] == "etro_branches" and record["git_sha"] == "0123abc"
    assert record["study"] == "study_1" and record["generated_at"] == PROV.generated_at
    assert record["run_ids"] == sorted(f"{m}-{s}" for m in ("grpo", "etro", "etro_global_positive",
                                                             "etro_global_negative")
                                       for s in range(3))
    etro = [c for c in record["cells"] if c["row"] == "ETRO"]
    assert etro == [{"section": "qwen_1.5b", "row": "ETRO", "column": "shop.success", "n": 3,
                     "mean": 0.808, "std": 0.02, "ci_low": pytest.approx(0.788),
                     "ci_high": pytest.approx(0.828), "n_paired": 3, "diff_vs_baseline": 0.188,
                     "p_holm_vs_baseline": 0.02, "mde_vs_baseline": None,
                     "p_holm_vs_best": None, "marker": BETTER,
                     "run_ids": ["etro-0", "etro-1", "etro-2"], "reported_by": None}]
    assert record["ci_method"] == "Student t interval over seeds"
    assert record["caption"].startswith("Skill selection")
    tex = paths[1].read_text().splitlines()
    assert tex[:4] == ["% table: etro_branches", "% study: study_1", "% git_sha: 0123abc",
                       f"% generated_at: {PROV.generated_at}"]
    assert "etro-0" in "\n".join(line for line in tex if line.startswith("%"))


def test_read_reported_names_missing_columns(tmp_path):
    pd.DataFrame([{"method": "icsd", "shop.success": 1.0}]).to_csv(tmp_path / "r.csv")
    with pytest.raises(ValueError, match=r"lacks columns \['backbone', 'source'\]"):
        read_reported(tmp_path / "r.csv")


def test_caption_names_the_mde_of_each_row_not_shown_different():
    """A tested row without a marker is named with its minimum detectable effect (display
    units); a marked row, the baseline and an untested row are not."""
    rows = [_summary_row("grpo", 0.620, not_worse=False),
            {**_summary_row("etro", 0.640, not_worse=True, diff=0.02), "mde_vs_baseline": 0.0512},
            {**_summary_row("etro_global_positive", 0.772, not_worse=True, significant=True,
                            diff=0.152), "mde_vs_baseline": 0.04}]
    table = LAYOUTS["etro_branches"].table(pd.DataFrame(rows))
    text = caption(table)
    assert "Not shown different from GRPO" in text and "ETRO ± 5.1." in text
    assert "± 4.0" not in text  # the significant row
    record = json.loads(json.dumps(provenance_record(table, PROV)))
    mdes = {c["row"]: c["mde_vs_baseline"] for c in record["cells"]}
    assert mdes["ETRO"] == pytest.approx(0.0512) and mdes["GRPO"] is None
    plain = LAYOUTS["etro_branches"].table(pd.DataFrame(rows[:1] + [_summary_row(
        "etro", 0.640, not_worse=True, diff=0.02)]))
    assert "Not shown different" not in caption(plain)  # no MDE in the summary: nothing said


def test_a_caption_summarizes_a_long_list_of_undecided_cells():
    """Past MAX_LISTED undecided cells the caption gives their count and MDE range (a list
    over every cell of a wide table overflowed TeX's largest dimension in CI); the JSON
    sidecar keeps each cell's."""
    methods = ["etro", "etro_global_positive", "etro_global_negative"]
    rows = [_summary_row("grpo", 0.62, not_worse=False, backbone=b) for b in ("b1", "b2", "b3")]
    rows += [{**_summary_row(m, 0.63, not_worse=True, diff=0.01, backbone=b),
              "mde_vs_baseline": 0.03 + 0.01 * i}
             for i, (m, b) in enumerate((m, b) for m in methods for b in ("b1", "b2", "b3"))]
    table = LAYOUTS["etro_branches"].table(pd.DataFrame(rows))
    assert len(not_shown_different(table)) == 9 > MAX_LISTED
    text = caption(table)
    assert "9 cells, from ± 3.0 to ± 11.0 (each cell's is mde_vs_baseline" in text
    assert "ETRO (" not in text
    few = LAYOUTS["etro_branches"].table(pd.DataFrame(rows[:3] + rows[3:6]))
    assert "; " in caption(few).split("Holm's first step): ")[1]  # 3 cells: named one by one
