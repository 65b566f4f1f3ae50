"""analysis.diagnostics on constructed record and run frames with hand-computed answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.diagnostics import (
    Skipped,
    compute_cost,
    gate_by_region,
    gate_sensitivity,
    gate_table,
    staleness,
    value_alignment,
    writer_reliability,
)


def test_gate_table_matches_the_review():
    table = gate_table().set_index(["delta", "beta"])["gate"]
    assert table[(0.3, 5.0)] == pytest.approx(0.818, abs=5e-4)
    assert table[(0.1, 10.0)] == pytest.approx(0.731, abs=5e-4)
    assert table[(0.8, 1.0)] == pytest.approx(0.690, abs=5e-4)
    assert len(table) == 16


def test_gate_sensitivity_groups_by_beta_and_skips_without_variation():
    runs = pd.DataFrame({"method": "seed", "env": "household", "seed": [0, 1, 0, 1],
                         "algo.beta_opd": [1.0, 1.0, 5.0, 5.0], "acc": [0.4, 0.6, 0.7, 0.9]})
    out = gate_sensitivity(runs, "acc", n_boot=200)
    assert out["algo.beta_opd"].tolist() == [1.0, 5.0]
    assert out["mean"].tolist() == pytest.approx([0.5, 0.8]) and out["n"].tolist() == [2, 2]
    skipped = gate_sensitivity(runs[runs["algo.beta_opd"] == 1.0], "acc")
    assert isinstance(skipped, Skipped) and "1 value" in skipped.reason
    assert isinstance(gate_sensitivity(runs, "acc", param="algo.lambda_opd"), Skipped)


def test_gate_by_region_is_the_distribution_of_the_measured_gate(turn):
    """Per region the scored turns' gate (NaN turns, e.g. evaluation, left out), and every
    region pooled as "all"; quantiles are numpy's (linear)."""
    rec = pd.DataFrame([
        turn(traj=0, turn=0, region="prefix", gate_mean=0.2, delta_pos=-0.3),
        turn(traj=0, turn=1, region="prefix", gate_mean=0.4, delta_pos=-0.1),
        turn(traj=0, turn=2, region="error", gate_mean=0.6, delta_pos=0.1),
        turn(traj=1, turn=0, region="success", gate_mean=0.9, delta_pos=0.4),
        turn(traj=2, turn=0, region="no_boundary", split="eval"),  # not scored
        turn(run_id="q", traj=0, turn=0, region="prefix", gate_mean=0.6, delta_pos=0.2),
    ]).assign(method="seed")
    out = gate_by_region(rec, by=("method",)).set_index(["quantity", "region"])
    gate = out.loc["gate_mean"]
    assert list(gate.index) == ["prefix", "error", "success", "all"]  # region order
    assert gate.loc["prefix", "n_turns"] == 3 and gate.loc["prefix", "n_runs"] == 2
    assert gate.loc["prefix", "mean"] == pytest.approx(0.4)
    assert gate.loc["prefix", "std"] == pytest.approx(0.2)
    assert gate.loc["prefix", "median"] == pytest.approx(0.4)
    assert gate.loc["prefix", "q25"] == pytest.approx(0.3) and gate.loc["prefix", "q05"] == pytest.approx(0.22)
    assert gate.loc["all", "n_turns"] == 5 and gate.loc["all", "mean"] == pytest.approx(0.54)
    assert out.loc[("delta_pos", "error"), "mean"] == pytest.approx(0.1)
    none = gate_by_region(rec.assign(gate_mean=np.nan), by=("method",))
    assert isinstance(none, Skipped) and "no turn has a measured gate" in none.reason


def test_value_alignment_covariance_and_gain(turn):
    rec = pd.DataFrame([turn(traj=0, action="a", gate_mean=0.2, **{"return": 0.0}),
                        turn(traj=1, action="b", gate_mean=0.8, **{"return": 1.0}),
                        turn(traj=2, state_key="z", gate_mean=np.nan, **{"return": 5.0})])
    row = value_alignment(rec).iloc[0]
    assert row["n_turns"] == 2 and row["gate_mean"] == pytest.approx(0.5)
    assert row["cov"] == pytest.approx(0.15) and row["gain"] == pytest.approx(0.3)
    assert row["cov_within_state"] == pytest.approx(0.15)
    assert isinstance(value_alignment(rec.assign(gate_mean=np.nan)), Skipped)


def _stale_runs():
    return pd.DataFrame({"run_id": ["fresh", "stale"], "method": "seed", "env": "household",
                         "backbone": "tiny", "seed": 0, "algo.beta_opd": 5.0,
                         "writer.refresh_every": [1, 0]})


def test_staleness_reproduces_the_eq14_example(turn):
    # SEED review: Delta 0.80 (current) vs 0.30 (stale), beta 5 -> |g gap| 0.1644, bound 0.625.
    rec = pd.DataFrame([turn(run_id="fresh", delta_pos=0.8), turn(run_id="stale", delta_pos=0.3),
                        turn(run_id="stale", state_key="unmatched", delta_pos=0.0)])
    out = staleness(_stale_runs(), rec)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["refresh_every"] == 0 and row["n_matched"] == 1
    assert row["gate_discrepancy"] == pytest.approx(0.1644, abs=1e-4)
    assert row["bound"] == pytest.approx(0.625)
    one_level = _stale_runs().assign(**{"writer.refresh_every": 1})
    assert isinstance(staleness(one_level, rec), Skipped)


def test_writer_reliability_rates(turn):
    cases = [(2, 2), (1, 3), (-1, 1), (2, -1), (-1, -1)]  # (writer, true) per failed traj
    rows = [turn(traj=i, error_turn_writer=w, error_turn_true=t) for i, (w, t) in enumerate(cases)]
    rows.append(turn(traj=9, success=True, error_turn_writer=3, error_turn_true=-1))
    rows.append(turn(traj=0, turn=1, error_turn_writer=2, error_turn_true=2))  # same traj
    row = writer_reliability(pd.DataFrame(rows)).iloc[0]
    assert (row["n_failed"], row["n_true_boundary"], row["n_no_true_boundary"]) == (5, 3, 2)
    assert row["boundary_acceptance"] == pytest.approx(2 / 3)
    assert row["exact_turn"] == pytest.approx(1 / 3)
    assert row["false_boundary_rate"] == pytest.approx(1 / 2)
    assert row["mean_offset"] == pytest.approx(-1.0)
    no_truth = pd.DataFrame(rows).assign(error_turn_true=-1)
    assert isinstance(writer_reliability(no_truth), Skipped)


def test_compute_cost_phases_and_overhead():
    runs = pd.DataFrame({"env": "household", "backbone": "tiny",
                         "method": ["grpo", "grpo", "seed"],
                         "time/rollout_s/sum": [8.0, 12.0, 10.0],
                         "time/write_s/sum": [0.0, 0.0, 5.0],
                         "time/update_s/sum": [5.0, 5.0, 5.0]})
    out = compute_cost(runs).set_index(["method", "phase"])
    assert out.loc[("grpo", "total"), "mean_s"] == pytest.approx(15.0)
    assert out.loc[("grpo", "total"), "n"] == 2
    assert out.loc[("seed", "total"), "overhead"] == pytest.approx(20.0 / 15.0)
    assert out.loc[("seed", "write"), "share"] == pytest.approx(0.25)
    assert math.isnan(out.loc[("seed", "write"), "overhead"])  # grpo spends 0 s writing
    assert out.loc[("seed", "eval"), "mean_s"] == 0.0  # absent phase counts as 0
    assert isinstance(compute_cost(runs.drop(columns=[c for c in runs if "time/" in c])),
                      Skipped)


def test_weighted_spearman_equals_spearman_of_the_expanded_sample():
    from analysis.ranks import spearman, weighted_spearman

    rng = np.random.default_rng(1)
    x = np.round(rng.normal(size=15), 1)  # rounding creates ties
    y = x + rng.normal(size=15)
    weights = rng.integers(0, 3, size=(20, 15))
    expected = [spearman(np.repeat(x, w), np.repeat(y, w)) for w in weights]
    np.testing.assert_allclose(weighted_spearman(x, y, weights.astype(float)), expected)


def test_staleness_pairs_by_cell_and_refresh_not_by_method_name(turn):
    """seed (refresh 1) and seed_stale (refresh 0) of the same cell pair; a stale run of a
    different cell (another lambda_opd) does not."""
    runs = pd.DataFrame({"run_id": ["fresh", "stale", "other"], "method": ["seed", "seed_stale", "seed_stale"],
                         "algo.method": ["seed", "seed_stale", "seed_stale"], "env": "household",
                         "backbone": "tiny", "seed": 0, "algo.beta_opd": 5.0,
                         "algo.lambda_opd": [0.01, 0.01, 0.5], "output.dir": ["a", "b", "c"],
                         "writer.refresh_every": [1, 0, 0]})
    rec = pd.DataFrame([turn(run_id="fresh", delta_pos=0.8), turn(run_id="stale", delta_pos=0.3),
                        turn(run_id="other", delta_pos=0.0)])
    out = staleness(runs, rec)
    assert not isinstance(out, Skipped), out
    assert list(out["run_id"]) == ["stale"] and list(out["ref_run_id"]) == ["fresh"]
    assert list(out["method"]) == ["seed_stale"]
    assert out.iloc[0]["gate_discrepancy"] == pytest.approx(0.1644, abs=1e-4)
