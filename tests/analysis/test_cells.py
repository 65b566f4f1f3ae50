"""analysis.cells: per-run diagnostics onto cells, statistics over seeds, hand-computed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import row_aggregates
from analysis.cells import cell_stats, cost_cells, gain_cells, without_writer
from analysis.stats import t_ci


def _runs():
    return pd.DataFrame({"run_id": ["a", "b", "c", "d"], "seed": [0, 0, 1, 0],
                         "backbone": "m", "env_label": "E", "method": ["x", "x", "x", "y"],
                         "variant": ["x", "x", "x", "y"],
                         "time/rollout_s/sum": [1.0, 3.0, 4.0, np.nan],
                         "time/update_s/sum": [1.0, 1.0, 1.0, 2.0]})


def test_runs_of_one_seed_are_averaged_before_the_seed_statistics():
    per_run = pd.DataFrame({"run_id": ["a", "b", "c"], "v": [0.2, 0.4, 0.9]})
    out = cell_stats(per_run, _runs(), ["v"]).iloc[0]
    assert (out["variant"], out["column"], out["n"]) == ("x", "v", 2)
    assert out["mean"] == pytest.approx((0.3 + 0.9) / 2)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(t_ci([0.3, 0.9]))


def test_cost_counts_a_missing_phase_as_zero_seconds_and_totals_the_phases():
    out = cost_cells(_runs()).set_index(["variant", "column"])
    assert out.loc[("y", "time/rollout_s/sum"), "mean"] == 0.0
    assert out.loc[("y", "total_s"), "mean"] == 2.0
    assert out.loc[("x", "total_s"), "mean"] == pytest.approx((3.0 + 5.0) / 2)
    assert "no time/" in cost_cells(_runs()[["run_id", "seed", "variant"]]).reason


def test_gain_cells_need_an_evaluation_before_rl():
    hist = pd.DataFrame({"run_id": ["a", "a"], "key": "eval/e/success", "step": [0, 5],
                         "value": [0.2, 0.5]})
    keys_of = pd.Series({"a": ("eval/e/success",)})
    gain = gain_cells(_runs(), hist, keys_of).set_index("column")
    assert gain.loc["gain", "mean"] == pytest.approx(0.3) and gain.loc["rose", "mean"] == 1.0
    assert "step 0" in gain_cells(_runs(), hist.assign(step=[1, 5]), keys_of).reason


def test_without_writer_reads_the_resolved_kind_then_the_method_tag():
    runs = pd.DataFrame({"writer.kind": ["none", "self"], "method_writer": ["self", "none"]})
    assert without_writer(runs).tolist() == [True, False]
    assert without_writer(runs.drop(columns="writer.kind")).tolist() == [False, True]


def test_row_aggregates_say_why_there_is_nothing_to_aggregate():
    runs = _runs().assign(score=[0.1, 0.2, 0.3, 0.4])
    assert "no evaluation metric" in row_aggregates(runs, []).reason
    one = runs[runs["variant"] == "x"]
    assert "single table row" in row_aggregates(one, ["score"]).reason
    agg, profiles = row_aggregates(runs, ["score"], baseline="y", n_boot=50)
    assert set(agg["variant"]) == {"x", "y"} and set(profiles["method"]) == {"x", "y"}
