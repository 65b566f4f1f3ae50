"""Sensitivity studies report as such: a search gets its best trials with intervals, slices,
a contour and Optuna's importances; a one-axis grid a curve; a two-axis grid a heatmap."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.diagnostics import Skipped
from analysis.sensitivity import importances, sensitivities
from reports.index import ReportInputs, build_report
from reports.prepared import FINAL_SUCCESS, prepare_runs
from support.paths import EXAMPLES
from support.reports_fakes import fake_runs, study_frame
from sweeps.study import load_study
from sweeps.trials import make_trial

POINTS = ((2.38611, 0.0195789), (0.7, 0.002), (12.0, 0.05), (5.0, 0.001))


def _search_runs():
    study = load_study(EXAMPLES / "sensitivity.yaml")
    trials = [make_trial(study, {"algo.beta_opd": b, "algo.lambda_opd": lam}, seed)
              for b, lam in POINTS for seed in study.seeds]
    # True success depends on beta only: 0.4 + 0.02 * beta.
    return study, study_frame(study, trials=trials,
                              score=lambda cfg: 0.4 + 0.02 * cfg.algo.beta_opd)


def test_search_study_is_a_search_over_two_params():
    study, runs = _search_runs()
    assert study.search is not None and len(runs) == 8
    found = sensitivities(prepare_runs(runs), FINAL_SUCCESS, search=True)
    assert len(found) == 1
    s = found[0]
    assert s.method == "seed" and s.kind == "search"
    assert s.params == ("algo.beta_opd", "algo.lambda_opd")
    cells = s.cells.set_index("algo.beta_opd")
    assert cells.loc[12.0, "n"] == 2 and cells.loc[12.0, "mean"] == pytest.approx(0.4 + 0.24,
                                                                                 abs=0.02)
    ranks = importances(s).set_index("param")["importance"]
    assert ranks["algo.beta_opd"] > ranks["algo.lambda_opd"]


def test_search_report_has_best_trials_slices_contour_and_importances(tmp_path):
    study, runs = _search_runs()
    inputs = ReportInputs.from_frames(runs, search=True, expected=8, n_boot=20)
    text = build_report(inputs, tmp_path, study.name, "sha").read_text()
    best = (tmp_path / "tables" / "sensitivity_seed_best.md").read_text()
    assert "| Method | β | λ | success |" in best
    assert "| SEED | 12 | 0.05 | 62.6 [" in best  # best first, mean [95% CI] (2 seeds)
    assert "| SEED | 2.39 | 0.0196 |" in best  # rounded to 3 significant digits
    assert (tmp_path / "figures" / "sensitivity_seed.png").stat().st_size > 5_000
    assert (tmp_path / "tables" / "sensitivity_seed_importance.md").is_file()
    assert "gate_sensitivity" not in text and "β=2.39, λ=0.0196" in text


def test_a_search_whose_trials_tie_reports_everything_else(tmp_path):
    """Four trials that score the same (this file's household search on CPU scored 0% on
    every run): no importances, said in one line of the index, and every other table and
    figure written."""
    study = load_study(EXAMPLES / "sensitivity.yaml")
    trials = [make_trial(study, {"algo.beta_opd": b, "algo.lambda_opd": lam}, seed)
              for b, lam in POINTS for seed in study.seeds]
    runs = study_frame(study, trials=trials, score=lambda cfg: 0.0)
    runs[study.search.metric] = 0.0  # no seed noise: every run at 0%
    found = sensitivities(prepare_runs(runs), FINAL_SUCCESS, search=True)
    skipped = importances(found[0])
    assert isinstance(skipped, Skipped)
    env = study.base.env.name
    assert skipped.reason.startswith(f"all 4 cells of {env} score 0 (the trials tie)")
    text = build_report(ReportInputs.from_frames(runs, search=True, expected=8, n_boot=20),
                        tmp_path, study.name, "sha").read_text()
    lines = [line for line in text.splitlines() if line.startswith("- importance[seed]")]
    assert lines == [f"- importance[seed]: {skipped.reason}"]
    # every file a search whose trials differ gets, but the importance table
    _, differ = _search_runs()
    build_report(ReportInputs.from_frames(differ, search=True, expected=8, n_boot=20),
                 tmp_path / "differ", study.name, "sha")
    files = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
             if p.is_file() and "differ" not in p.parts}
    other = {p.relative_to(tmp_path / "differ").as_posix()
             for p in (tmp_path / "differ").rglob("*") if p.is_file()}
    assert files == other - {f"tables/sensitivity_seed_importance.{x}" for x in ("md", "tex",
                                                                                   "json")}
    assert (tmp_path / "figures" / "sensitivity_seed.png").stat().st_size > 5_000


def test_one_axis_grid_is_a_curve_and_grpo_is_never_plotted_against_beta():
    parts = []
    for beta in (1.0, 5.0):
        part = fake_runs({"grpo": 0.5, "seed": 0.6 + 0.01 * beta}, envs=("household",),
                         params={"grpo": {"algo.beta_opd": beta, "algo.lambda_opd": 0.0},
                                 "seed": {"algo.beta_opd": beta, "algo.lambda_opd": 0.01}})
        part["run_id"] += f"-{beta}"
        part["cell_id"] += f"-{beta}"
        parts.append(part)
    found = sensitivities(prepare_runs(pd.concat(parts, ignore_index=True)), FINAL_SUCCESS)
    assert [(s.method, s.kind, s.params) for s in found] == [("seed", "curve",
                                                              ("algo.beta_opd",))]


def test_two_axis_grid_is_a_heatmap(tmp_path):
    parts = []
    for beta in (1.0, 5.0):
        for lam in (0.01, 0.1):
            part = fake_runs({"seed": 0.5 + 0.01 * beta + lam}, envs=("household",),
                             params={"seed": {"algo.beta_opd": beta, "algo.lambda_opd": lam}})
            part["run_id"] += f"-{beta}-{lam}"
            part["cell_id"] += f"-{beta}-{lam}"
            parts.append(part)
    runs = pd.concat(parts, ignore_index=True)
    found = sensitivities(prepare_runs(runs), FINAL_SUCCESS)
    assert found[0].kind == "heatmap"
    build_report(ReportInputs.from_frames(runs, n_boot=20), tmp_path, "s", "sha")
    assert (tmp_path / "figures" / "sensitivity_seed.pdf").is_file()


def test_no_sensitivity_without_a_swept_param():
    found = sensitivities(prepare_runs(fake_runs({"seed": 0.5})), FINAL_SUCCESS)
    assert isinstance(found, Skipped) and "varies" in found.reason
