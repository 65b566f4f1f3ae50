"""A whole report, built from the fake frames that feed every table and figure
(:func:`reports_fakes.every_diagnostic`, plus reported rows), comes out as it did when these
digests were recorded.

Recorded at ab953e3, before analysis/ and reports/ were split into "analysis computes,
reports draw" (issue 29, item 4): a restructuring that changes no output leaves every digest
as it is. Each table file (.md, .tex, .json), ``index.md`` and ``index.html`` is compared as
text (the generation time and the embedded PNG bytes blanked out); each figure as a
description of what it draws, taken where it would be saved (titles, axis labels and scales,
ticks, lines, bands, bars, boxes, texts and legends, floats to 9 significant digits), so that
a different font stack or matplotlib build does not change it but a moved point, a renamed
label or a changed colour does. A deliberate change of an output records the digests the
failure prints. ``figures/training_curves`` was re-recorded at 0c5f55a, whose suptitle
says that rates are clipped to [0, 1] (issue 28, item 3); the report's table list, ordering and
colours at the commit that added the ``seed_writer`` table and put ``seed_stale`` and
``seed_constrained`` into the method order; every table's caption and sidecar at the commit
that added each comparison's minimum detectable effect (issue 45: ``mde_vs_baseline``); the
regional alignment figure, ``index.*`` and the new ``tables/regional_alignment.md`` and
``figures/delta_profile`` at the commit that drew an undefined rho as n/a and added where the
skill lands (issue 43); ``etro_table1``'s caption and ``index.*`` at the commit that
summarized a caption's long list of undecided cells by count and range (CI: TeX overflowed).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import matplotlib.colors
import numpy as np
from matplotlib.figure import Figure

from reports.index import ReportInputs, build_report
from support.reports_fakes import every_diagnostic

N_BOOT = 200
WHEN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")
PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")
EXPECTED = {
    "figures/compute_cost": "27bb273e9ec50319",
    "figures/delta_profile": "f230ec98ba91afd4",
    "figures/evaluation_curves": "4957be67e2d9592b",
    "figures/gate_curves": "d636cdfa37162a78",
    "figures/performance_profiles": "3426c1664f2ae06b",
    "figures/regional_alignment": "b0bd72796f681407",
    "figures/sensitivity_etro_suffix_negative": "7ca416874c4ed00e",
    "figures/sensitivity_etro_suffix_positive": "a55416e2a63f25d1",
    "figures/sensitivity_seed": "2f6abe10719ea338",
    "figures/training_curves": "a8fd18696799bd7c",
    "index.html": "1efdbb9ded260c92",
    "index.md": "11e605417d384297",
    "tables/aggregates.json": "c603837e976348a3",
    "tables/aggregates.md": "f76ddd7b96ebe047",
    "tables/aggregates.tex": "130386acee745c39",
    "tables/compute_cost.json": "c6bfc08cca2ce6ae",
    "tables/compute_cost.md": "5e26fda6c45441b6",
    "tables/compute_cost.tex": "260d0998e29ac7a7",
    "tables/regional_alignment.md": "4cfe983f3894f362",
    "tables/etro_alpha.json": "f1304cb993138493",
    "tables/etro_alpha.md": "59446183c4b258ca",
    "tables/etro_alpha.tex": "d1b50042fbf78e79",
    "tables/etro_branches.json": "7653e8817e3795bd",
    "tables/etro_branches.md": "00c554e00dd5ba0e",
    "tables/etro_branches.tex": "294521ade27e81b0",
    "tables/etro_suffix.json": "626e728ec97af7e4",
    "tables/etro_suffix.md": "a5b3273eddeca9ac",
    "tables/etro_suffix.tex": "3790032d5163b10e",
    "tables/etro_table1.json": "3c02c4cba38de14f",
    "tables/etro_table1.md": "cd44d9014af714a4",
    "tables/etro_table1.tex": "6b04aae17824bd5e",
    "tables/family_breakdown.json": "d37b0a470ff8c1cf",
    "tables/family_breakdown.md": "cf47f5ab2e3f2422",
    "tables/family_breakdown.tex": "f20449b7553e10f0",
    "tables/seed_ablation.json": "e8bf6fc6c6477cdf",
    "tables/seed_ablation.md": "4d736fad30e3e575",
    "tables/seed_ablation.tex": "071ab773cf4a76d8",
    "tables/seed_multimodal.json": "7ebd31d6cf48b765",
    "tables/seed_multimodal.md": "7ebe54142e595b7e",
    "tables/seed_multimodal.tex": "e58d59e0dc015adf",
    "tables/seed_writer.json": "9d8b9dfd2ed43362",
    "tables/seed_writer.md": "a5af595a77854345",
    "tables/seed_writer.tex": "55192fc421df28f0",
    "tables/sensitivity_etro_suffix_negative_best.json": "d74ba7b90070860e",
    "tables/sensitivity_etro_suffix_negative_best.md": "f30b940eaadc9b46",
    "tables/sensitivity_etro_suffix_negative_best.tex": "8b19359b50ced1ab",
    "tables/sensitivity_etro_suffix_positive_best.json": "d0c8e3fb333bb689",
    "tables/sensitivity_etro_suffix_positive_best.md": "962ed86b6e179fe7",
    "tables/sensitivity_etro_suffix_positive_best.tex": "3eb3879ed98e82fe",
    "tables/sensitivity_seed_best.json": "53e89669e108c492",
    "tables/sensitivity_seed_best.md": "543931c1728e5b12",
    "tables/sensitivity_seed_best.tex": "ac2dd852c35a727f",
    "tables/sensitivity_seed_importance.json": "c33938c165fdd0a1",
    "tables/sensitivity_seed_importance.md": "16a3e93e13409e7e",
    "tables/sensitivity_seed_importance.tex": "adf6b9949bb5b1e0",
    "tables/staleness.json": "868c3876d00f88b5",
    "tables/staleness.md": "2344da8a6000ecaf",
    "tables/staleness.tex": "f83e494cb7401e38",
    "tables/tables.tex": "72adac0d17a6c764",
    "tables/value_alignment.json": "91273a4ebbe44174",
    "tables/value_alignment.md": "d3838ff21969bba1",
    "tables/value_alignment.tex": "42fdda4f2b0a4712",
    "tables/warm_start_gain.json": "298648ac7920a831",
    "tables/warm_start_gain.md": "60e7435e506fbf03",
    "tables/warm_start_gain.tex": "41fa5ae9f80f1c1e",
    "tables/writer_reliability.json": "1df5ce385a338a24",
    "tables/writer_reliability.md": "e098b7b38e6f387f",
    "tables/writer_reliability.tex": "347a6d9c9ab37541",
}


def _num(x) -> str:
    return f"{float(x):.9g}"


def _nums(values) -> list[str]:
    return [_num(v) for v in np.ravel(np.asarray(values, dtype=float))]


def _color(c) -> str:
    return matplotlib.colors.to_hex(c, keep_alpha=True) if c is not None else "none"


def _axes(ax) -> dict:
    lines = [{"label": line.get_label(), "x": _nums(line.get_xdata()),
              "y": _nums(line.get_ydata()), "color": _color(line.get_color()),
              "marker": str(line.get_marker()), "style": str(line.get_linestyle())}
             for line in ax.get_lines()]
    collections = [{"kind": type(c).__name__, "label": c.get_label(),
                    "paths": [_nums(p.vertices) for p in c.get_paths()],
                    "offsets": _nums(c.get_offsets()),
                    "faces": [_color(f) for f in np.atleast_2d(c.get_facecolor())]}
                   for c in ax.collections]
    patches = [{"kind": type(p).__name__, "label": p.get_label(),
                "box": _nums(p.get_path().transformed(p.get_patch_transform()).vertices)
                if hasattr(p, "get_patch_transform") else [],
                "face": _color(p.get_facecolor())} for p in ax.patches]
    legend = ax.get_legend()
    return {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "scales": [ax.get_xscale(), ax.get_yscale()],
            "xticks": [t.get_text() for t in ax.get_xticklabels()],
            "yticks": [t.get_text() for t in ax.get_yticklabels()],
            "texts": [t.get_text() for t in ax.texts],
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
            "lines": lines, "collections": collections, "patches": patches}


def describe(fig: Figure) -> dict:
    """What a figure draws, independent of how it is rasterised."""
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return {"suptitle": title, "size": _nums(fig.get_size_inches()),
            "legends": [[t.get_text() for t in leg.get_texts()] for leg in fig.legends],
            "axes": [_axes(ax) for ax in fig.axes if ax.get_visible()]}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def report_digests(out, figures: dict) -> dict[str, str]:
    got = {}
    files = [*sorted((out / "tables").glob("*")), out / "index.md", out / "index.html"]
    for path in files:
        text = PNG.sub("data:image/png;base64,", WHEN.sub("<when>", path.read_text("utf-8")))
        got[path.relative_to(out).as_posix()] = _digest(text)
    for name, description in sorted(figures.items()):
        got[f"figures/{name}"] = _digest(json.dumps(description, sort_keys=True))
    return got


def test_every_table_figure_and_index_is_unchanged(tmp_path, monkeypatch):
    drawn: dict[str, dict] = {}

    def recording(fig, path, *args, **kwargs):  # rasterising would take half the time
        if str(path).endswith(".png"):
            drawn[str(path).rpartition("/")[2][:-4]] = describe(fig)
        Path(path).write_bytes(b"")

    monkeypatch.setattr(Figure, "savefig", recording)
    runs, records, histories = every_diagnostic()
    reported = tmp_path / "reported.csv"  # rows of methods this tool does not run
    reported.write_text("method,backbone,shop.success,source\n"
                        "icsd,Qwen/Qwen2.5-7B-Instruct,75.8,ETRO Table 1\n"
                        "opid,Qwen/Qwen2.5-7B-Instruct,71.2,ETRO Table 1\n"
                        "sdar,Qwen/Qwen2.5-7B-Instruct,70.1,ETRO Table 1\n")
    inputs = ReportInputs.from_frames(runs, histories=histories, records=records,
                                      external_csv=reported, n_boot=N_BOOT)
    out = tmp_path / "report"
    build_report(inputs, out, "snapshot", "0000000")
    got = report_digests(out, drawn)
    changed = sorted(k for k in set(got) | set(EXPECTED) if got.get(k) != EXPECTED.get(k))
    assert not changed, ("changed: " + ", ".join(changed) + "\nnew digests:\n"
                         + json.dumps(got, indent=4, sort_keys=True))
