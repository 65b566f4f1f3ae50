"""analysis.pruning: the objective a search trial reports, the runs of pruned trials left out
of cells, the count of pruned trials by step, and the sensitivity analysis without them."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.pruning import PRUNED_TAG, objective, pruned_trials, without_pruned
from analysis.sensitivity import best_cells, sensitivities
from reports.prepared import FINAL_SUCCESS, prepare_runs
from support.paths import EXAMPLES
from support.reports_fakes import study_frame
from sweeps.study import load_study
from sweeps.trials import make_trial

POINTS = ((2.0, 0.01), (0.7, 0.002), (12.0, 0.05), (5.0, 0.001))


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"run_id": list("abcdef"), "cell_id": ["c1", "c1", "c2", "c3", "c3", "c4"],
                         "status": ["FINISHED", "KILLED", "FINISHED", "KILLED", "KILLED", "FINISHED"],
                         PRUNED_TAG: ["4", "4", None, "2", "2", "10"]})


def test_objective_is_the_mean_over_seeds_so_far():
    assert objective([0.5]) == 0.5
    assert objective([0.5, 0.3]) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no values"):
        objective([])


def test_a_pruned_trials_cell_is_left_out_with_its_finished_seeds():
    kept = without_pruned(_frame())
    assert list(kept["run_id"]) == ["c"]  # c1's finished seed goes with its pruned one
    assert without_pruned(_frame().drop(columns=PRUNED_TAG)).shape[0] == 6  # no tag column


def test_pruned_trials_count_each_trial_once_at_its_step():
    counts = pruned_trials(_frame())
    # c3's two runs are one trial pruned at step 2; c1 at 4; c4 at 10 (ascending by step)
    assert counts.to_dict("records") == [{"pruned_at": 2, "trials": 1}, {"pruned_at": 4, "trials": 1},
                                         {"pruned_at": 10, "trials": 1}]
    assert pruned_trials(_frame().assign(**{PRUNED_TAG: None})).empty


def test_sensitivity_and_best_cells_leave_pruned_trials_out():
    study = load_study(EXAMPLES / "sensitivity.yaml")
    trials = [make_trial(study, {"algo.beta_opd": b, "algo.lambda_opd": lam}, seed)
              for b, lam in POINTS for seed in study.seeds]
    runs = study_frame(study, trials=trials, score=lambda cfg: 0.4 + 0.02 * cfg.algo.beta_opd)
    best = runs["algo.beta_opd"] == 12.0  # the best cell, pruned while its second seed ran
    runs.loc[best, PRUNED_TAG] = "4"
    runs.loc[best & (runs["seed"] == study.seeds[1]), "status"] = "KILLED"
    finished = prepare_runs(runs[runs["status"] == "FINISHED"])
    (s,) = sensitivities(finished, FINAL_SUCCESS, search=True)
    assert sorted(s.cells["algo.beta_opd"]) == [0.7, 2.0, 5.0]
    assert (s.cells["n"] == 2).all()
    assert best_cells(s, 1)["algo.beta_opd"].tolist() == [5.0]
    # untagged, the same finished seed would have been a cell of n = 1 and the best
    (s,) = sensitivities(prepare_runs(runs.assign(**{PRUNED_TAG: None})[runs["status"] == "FINISHED"]),
                         FINAL_SUCCESS, search=True)
    assert best_cells(s, 1)["algo.beta_opd"].tolist() == [12.0]


def test_the_report_says_how_many_trials_were_pruned_at_which_step(tmp_path):
    from reports.index import build_report
    from reports.inputs import ReportInputs

    study = load_study(EXAMPLES / "sensitivity.yaml")
    trials = [make_trial(study, {"algo.beta_opd": b, "algo.lambda_opd": lam}, seed)
              for b, lam in POINTS for seed in study.seeds]
    runs = study_frame(study, trials=trials, score=lambda cfg: 0.4 + 0.02 * cfg.algo.beta_opd)
    runs.loc[runs["algo.beta_opd"] == 12.0, [PRUNED_TAG, "status"]] = ["4", "KILLED"]
    runs.loc[(runs["algo.beta_opd"] == 0.7) & (runs["seed"] == study.seeds[0]), [PRUNED_TAG, "status"]] = \
        ["1", "KILLED"]
    inputs = ReportInputs.from_frames(runs, search=True, n_boot=20)
    text = build_report(inputs, tmp_path, "sensitivity", "abc1234").read_text()
    assert "- pruned search trials: 2 (1 at step 1, 1 at step 4; " in text
    assert "left out of the sensitivity analysis" in text
