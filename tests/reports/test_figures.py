"""Figures: each writes a real PNG and PDF (signature and size), or returns a Skipped."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import diagnostics
from analysis.alignment import ALIGNMENT_COLUMNS
from analysis.curves import training_bands
from analysis.diagnostics import Skipped
from reports import figures, style
from reports.figures.alignment import alignment_figure
from support.reports_fakes import fake_cost, fake_histories, fake_runs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_written(paths, stem):
    assert [p.name for p in paths] == [f"{stem.name}.png", f"{stem.name}.pdf"]
    png, pdf = (p.read_bytes() for p in paths)
    assert png.startswith(PNG_SIGNATURE) and len(png) > 5_000
    assert pdf.startswith(b"%PDF") and len(pdf) > 1_000


def test_training_curves(tmp_path):
    runs = fake_runs({"grpo": 0.5, "etro": 0.8}, envs=("shop", "household"))
    hist = fake_histories(runs).merge(runs[["run_id", "method", "env"]], on="run_id")
    stem = tmp_path / "curves"
    _assert_written(figures.training_curves(training_bands(hist), stem), stem)


def test_gate_figures(tmp_path):
    sens = pd.DataFrame({"method": "seed", "env": "shop", "algo.beta_opd": [1.0, 5.0, 20.0],
                         "n": 3, "mean": [0.6, 0.7, 0.65], "std": 0.02,
                         "ci_low": [0.58, 0.68, np.nan], "ci_high": [0.62, 0.72, np.nan]})
    _assert_written(figures.gate_sensitivity(sens, tmp_path / "sens"), tmp_path / "sens")
    formula = diagnostics.gate_table(np.linspace(-1, 1, 21), (1.0, 5.0))
    none = Skipped("gate_by_region", "no per-turn records were given")
    gates = diagnostics.GateFrames(none, Skipped("gate_sensitivity", "no OPD method varies β"),
                                   formula)
    _assert_written(figures.gate_curves(gates, tmp_path / "gates"), tmp_path / "gates")


def test_gate_figure_draws_the_measured_gate_and_success_against_beta(tmp_path, monkeypatch):
    """From a report's frames: records with a gate per turn and a SEED beta sweep give three
    panels (g by region, success vs β with intervals, the formula); without records the
    figure says what it does not draw."""
    from reports.index import ReportInputs

    runs = pd.concat([fake_runs({"seed": 0.5 + 0.05 * i}, envs=("household",),
                                params={"seed": {"algo.beta_opd": beta}}).assign(
                          run_id=lambda r, b=beta: r["run_id"] + f"-b{b}",
                          cell_id=lambda r, b=beta: r["cell_id"] + f"-b{b}")
                      for i, beta in enumerate((1.0, 5.0, 20.0))], ignore_index=True)
    rng = np.random.default_rng(0)
    records = pd.DataFrame([{"run_id": rid, "step": 1, "split": "train", "traj": t, "turn": k,
                             "region": region, "delta_pos": d, "gate_mean": 1 / (1 + np.exp(-5 * d))}
                            for rid in runs["run_id"] for t in range(4)
                            for k, (region, d) in enumerate(zip(("prefix", "error", "suffix"),
                                                                rng.normal(0, 0.1, 3)))])
    inputs = ReportInputs.from_frames(runs, records=records, n_boot=50)
    gates = inputs.figure_frames()["gate_curves"]
    measured = gates.by_region.set_index(["variant", "quantity", "region"])
    assert measured.loc[("seed (β=5)", "gate_mean", "prefix"), "n_turns"] == 12  # 4 x 3 seeds
    assert sorted(gates.vs_beta["algo.beta_opd"]) == [1.0, 5.0, 20.0]
    assert sorted(gates.formula["beta"].unique()) == [1.0, 5.0, 20.0]
    drawn = []
    monkeypatch.setattr(figures.gate, "save", lambda fig, stem: drawn.append(fig) or [])
    figures.gate_curves(gates, tmp_path / "g")
    visible = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == [
        "g by region (box: quartiles; whiskers: 5–95%)",
        "Household: success vs β (95% bootstrap CI)", "formula g = sigmoid(β Δ)"]
    assert [t.get_text().split("\n")[0] for t in visible[0].get_xticklabels()] == [
        "prefix", "error", "suffix"]
    bare = ReportInputs.from_frames(runs, n_boot=50).figure_frames()["gate_curves"]
    figures.gate_curves(bare, tmp_path / "bare")
    assert "not drawn: no per-turn records were given" in drawn[1]._suptitle.get_text()
    monkeypatch.undo()
    _assert_written(figures.gate_curves(gates, tmp_path / "gates"), tmp_path / "gates")


def _alignment_frame(rhos=(0.3, 0.5, -0.1)):
    rows = [(r, p, 40, 10, 8, rho, rho - 0.1, rho + 0.1, False, "")
            for r, rho in zip(("prefix", "error", "suffix"), rhos)
            for p in ("delta_pos", "delta_neg")]
    return pd.DataFrame(rows, columns=ALIGNMENT_COLUMNS)


def test_regional_alignment(tmp_path):
    stem = tmp_path / "align"
    _assert_written(figures.regional_alignment(_alignment_frame(), stem), stem)


def test_an_undefined_alignment_is_drawn_as_na_with_its_reason_never_a_bar():
    """DESIGN.md, Diagnostics: the suffix's NaN rho draws no bar (not a bar at 0) but "n/a",
    and the figure says why; a between-task rho is hatched and says so."""
    frame = _alignment_frame((0.3, 0.5, np.nan))
    suffix = frame["region"] == "suffix"
    frame.loc[suffix, ["ci_low", "ci_high"]] = np.nan
    frame.loc[suffix, "reason"] = "step advantage constant over the 130 turns after the error"
    frame.loc[frame["region"] == "error", "between_tasks_only"] = True
    fig = alignment_figure(frame)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if p.get_height() != 0 or p.get_width() != 0]
    assert len(bars) == 4  # prefix and error, two gaps each: nothing for the suffix
    assert sum(t.get_text() == "n/a" for t in ax.texts) == 2
    assert sum(bool(p.get_hatch()) for p in bars) == 2
    note = fig._supxlabel.get_text()  # the footnote under the panels
    assert note.count("constant over the 130 turns after the error") == 2
    assert note.count("between tasks only") == 2


def test_delta_profile(tmp_path):
    rows = [("turn", t, p, 10, 0.3 / (1 + t)) for t in range(3) for p in ("delta_pos", "delta_neg")]
    rows += [("offset", o, "delta_neg", 5, 0.05) for o in (-1, 0, 1)]
    frame = pd.DataFrame(rows, columns=["axis", "position", "polarity", "n_turns", "mean_abs"])
    stem = tmp_path / "profile"
    _assert_written(figures.delta_profile(frame.assign(method="seed"), stem), stem)
    assert "lacks columns" in figures.delta_profile(frame.drop(columns="mean_abs"), stem).reason


def test_compute_cost(tmp_path):
    runs = fake_cost(fake_runs({"grpo": 0.5, "etro": 0.8}, envs=("shop",), seeds=(0, 1)))
    cost = diagnostics.compute_cost(runs)
    stem = tmp_path / "cost"
    _assert_written(figures.compute_cost(cost, stem), stem)


def test_missing_inputs_are_skipped(tmp_path):
    given = Skipped("regional_alignment", "no kept turns")
    assert figures.regional_alignment(given, tmp_path / "a") is given
    assert "not given" in figures.training_curves(None, tmp_path / "b").reason
    assert "not given" in training_bands(None).reason
    bad = figures.compute_cost(pd.DataFrame({"env": ["shop"]}), tmp_path / "c")
    assert isinstance(bad, Skipped) and "method" in bad.reason
    hist = pd.DataFrame({"run_id": ["a"], "method": ["m"], "key": ["x"], "step": [0],
                         "value": [1.0]})
    none = figures.training_curves(training_bands(hist), tmp_path / "d")
    assert isinstance(none, Skipped) and "train/success" in none.reason
    bands = training_bands(hist.assign(key="train/success"))
    none = figures.training_curves(bands, tmp_path / "d", keys=("train/entropy",))
    assert isinstance(none, Skipped) and "train/entropy" in none.reason
    assert not list(tmp_path.iterdir())


def test_evaluation_curves_from_report_inputs(tmp_path):
    from reports.index import ReportInputs

    runs = fake_runs({"grpo": 0.5, "seed": 0.7}, envs=("household",), seeds=(0, 1, 2))
    runs["rollout.group_size"], runs["rollout.tasks_per_step"] = 4, 2
    rows = []
    for i, rid in enumerate(runs["run_id"]):
        for step in (0, 5, 10):
            rows.append((rid, "eval/eval_unseen/success", step, 0.1 * step / 10 + 0.01 * i))
            if step:
                rows.append((rid, "train/episode_length", step, 4.0))
    hist = pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])
    inputs = ReportInputs.from_frames(runs, histories=hist, n_boot=20)
    curves = inputs.diagnostics["evaluation_curves"]
    assert set(curves["label"]) == {"GRPO", "SEED"} and set(curves["env_label"]) == {"Household"}
    seed10 = curves[(curves["label"] == "SEED") & (curves["step"] == 10)].iloc[0]
    assert seed10["n"] == 3 and seed10["env_steps"] == 64.0  # 4 turns x 4 x 2, steps 5 and 10
    stem = tmp_path / "eval"
    _assert_written(figures.evaluation_curves(curves, stem), stem)


def test_evaluation_bands_of_two_seeds_stay_within_zero_one(tmp_path, monkeypatch):
    """n = 2 seeds far apart: the report's evaluation curves (and the figure's bands) stay in
    [0, 1], and the figure's title says the interval is clipped."""
    from reports.index import ReportInputs

    runs = fake_runs({"grpo": 0.5}, envs=("household",), seeds=(0, 1))
    rows = [(rid, "eval/eval_unseen/success", step, value)
            for rid, (a, b) in zip(runs["run_id"], ((0.02, 0.1), (0.98, 0.9)))
            for step, value in ((0, a), (5, b))]
    hist = pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])
    curves = ReportInputs.from_frames(runs, histories=hist, n_boot=20).diagnostics[
        "evaluation_curves"]
    assert curves["low"].min() == 0.0 and curves["high"].max() == 1.0
    assert curves["mean"].tolist() == pytest.approx([0.5, 0.5])
    drawn = []
    monkeypatch.setattr(figures.curves, "save", lambda fig, stem: drawn.append(fig) or [])
    figures.evaluation_curves(curves.assign(low=-3.0, high=4.0), tmp_path / "e")
    band = drawn[0].axes[0].collections[0].get_paths()[0].vertices[:, 1]  # the fill_between
    assert (band.min(), band.max()) == (0.0, 1.0)
    assert "clipped to [0, 1]" in drawn[0]._suptitle.get_text()


def test_curve_frame_labels_and_ranks_rows_once_per_pair(monkeypatch):
    """Labels and ranks of a history frame (a row per run, key and step) equal the row-wise
    ones; variant_label runs once per distinct (method, variant)."""
    calls, original = [], style.variant_label

    def label(method, variant):
        calls.append((method, variant))
        return original(method, variant)

    monkeypatch.setattr(figures.base, "variant_label", label)
    hist = pd.DataFrame({"run_id": ["a", "a", "b", "c"], "method": ["seed", "seed", "seed", "grpo"],
                         "variant": ["seed (β=1)", "seed (β=1)", "seed (β=5)", "grpo"],
                         "key": "train/success", "step": [1, 2, 1, 1], "value": 0.5})
    data = figures.base.labelled(hist)
    assert data["label"].tolist() == ["SEED (β=1)", "SEED (β=1)", "SEED (β=5)", "GRPO"]
    assert data["rank"].tolist() == [(style.method_rank("seed"), "SEED (β=1)")] * 2 + [
        (style.method_rank("seed"), "SEED (β=5)"), (0, "GRPO")]
    assert len(calls) == 3
