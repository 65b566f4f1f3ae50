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
    regional_alignment,
    staleness,
    step_advantages,
    value_alignment,
    writer_reliability,
)


def _turn(**kw):
    base = {"run_id": "r", "step": 0, "split": "train", "task_id": "t0", "group": 0,
            "traj": 0, "turn": 0, "state_key": "s", "action": "a", "reward": 0.0,
            "return": 0.0, "success": False, "error_turn_writer": -1, "error_turn_true": -1,
            "delta_pos": np.nan, "delta_neg": np.nan, "gate_mean": np.nan,
            "region": "no_boundary"}
    return {**base, **kw}


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


def test_gate_by_region_is_the_distribution_of_the_measured_gate():
    """Per region the scored turns' gate (NaN turns, e.g. evaluation, left out), and every
    region pooled as "all"; quantiles are numpy's (linear)."""
    rec = pd.DataFrame([
        _turn(traj=0, turn=0, region="prefix", gate_mean=0.2, delta_pos=-0.3),
        _turn(traj=0, turn=1, region="prefix", gate_mean=0.4, delta_pos=-0.1),
        _turn(traj=0, turn=2, region="error", gate_mean=0.6, delta_pos=0.1),
        _turn(traj=1, turn=0, region="success", gate_mean=0.9, delta_pos=0.4),
        _turn(traj=2, turn=0, region="no_boundary", split="eval"),  # not scored
        _turn(run_id="q", traj=0, turn=0, region="prefix", gate_mean=0.6, delta_pos=0.2),
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


def test_step_advantages_pool_returns_and_filter_groups():
    rec = pd.DataFrame([
        _turn(traj=0, state_key="s0", action="a", **{"return": 1.0}),
        _turn(traj=1, state_key="s0", action="a", **{"return": 0.5}),
        _turn(traj=2, state_key="s0", action="b", **{"return": 0.0}),
        _turn(traj=0, turn=1, state_key="s1", action="a", **{"return": 0.9}),  # singleton
        _turn(traj=1, turn=1, state_key="s2", action="c", **{"return": 0.3}),  # one action
        _turn(traj=2, turn=1, state_key="s2", action="c", **{"return": 0.1}),
        _turn(task_id="t1", traj=3, state_key="s0", action="b", **{"return": 7.0}),
    ])
    out = step_advantages(rec)
    assert out["traj"].tolist() == [0, 1, 2]  # only task t0's anchor s0 survives
    assert out["q_hat"].tolist() == pytest.approx([0.75, 0.75, 0.0])
    assert out["anchor_mean"].tolist() == pytest.approx([0.5] * 3)
    assert out["step_adv"].tolist() == pytest.approx([0.25, 0.25, -0.5])
    assert isinstance(step_advantages(rec.iloc[3:6]), Skipped)
    assert isinstance(step_advantages(rec.drop(columns="state_key")), Skipped)


def test_gigpo_variants_use_each_turns_own_return_and_keep_singletons():
    """verl-agent's GiGPO: own return minus the anchor mean (std-normalised in gigpo_std),
    singleton anchors at 0 and kept; the invalid-step penalty counts at its own turn only."""
    rec = pd.DataFrame([
        # traj 0: invalid first turn (penalty 0.1), then success; traj 1, 2: no reward
        _turn(traj=0, turn=0, state_key="s0", action="a", reward=-0.1),
        _turn(traj=0, turn=1, state_key="s1", action="a", reward=1.0),
        _turn(traj=1, turn=0, state_key="s0", action="a"),
        _turn(traj=2, turn=0, state_key="s0", action="b"),
    ])
    out = step_advantages(rec, "gigpo").set_index(["traj", "turn"])
    g00 = 0.95 * 1.0 - 0.1  # the success discounted back, the penalty not
    assert out.at[(0, 0), "q_hat"] == pytest.approx(g00) and out.at[(0, 1), "q_hat"] == 1.0
    assert out.at[(0, 0), "step_adv"] == pytest.approx(g00 - g00 / 3)
    assert out.at[(1, 0), "step_adv"] == pytest.approx(-g00 / 3)
    assert out.at[(0, 1), "step_adv"] == 0.0 and out.at[(0, 1), "anchor_size"] == 1
    std = step_advantages(rec, "gigpo_std").set_index(["traj", "turn"])
    spread = np.std([g00, 0.0, 0.0], ddof=1)
    assert std.at[(0, 0), "step_adv"] == pytest.approx((g00 - g00 / 3) / (spread + 1e-6))
    etro = step_advantages(rec)  # ETRO pools (s0, a) and drops the singleton s1
    assert len(etro) == 3 and set(etro["state_key"]) == {"s0"}
    with pytest.raises(ValueError, match="mode='verl'; valid"):
        step_advantages(rec, "verl")


def _regional_records(n_tasks=12):
    """Per task: a success and a failure (boundary k=1) through the same states p, e, s.

    The failure's step advantage at each state is (G_fail - G_succ) / 2; delta_pos is set to
    rise with it before the error and fall with it after, so rho is +1 (prefix), -1 (suffix).
    """
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n_tasks):
        for turn, state in enumerate("pes"):
            g_fail = 0.05 * i + 0.01 * turn
            adv = (g_fail - 1.0) / 2.0
            dpos = {"p": adv, "e": rng.normal(), "s": -adv}[state]
            rows.append(_turn(task_id=f"t{i}", traj=2 * i, turn=turn, state_key=state,
                              action="ok", success=True, **{"return": 1.0}))
            rows.append(_turn(task_id=f"t{i}", traj=2 * i + 1, turn=turn, state_key=state,
                              action="alt", error_turn_writer=1, delta_pos=dpos,
                              delta_neg=2 * adv, **{"return": g_fail}))
    return pd.DataFrame(rows)


def test_regional_alignment_signs_counts_and_cluster_ci():
    out = regional_alignment(_regional_records(), n_boot=300).set_index(["region", "polarity"])
    assert out.loc[("prefix", "delta_pos"), "rho"] == pytest.approx(1.0)
    assert out.loc[("suffix", "delta_pos"), "rho"] == pytest.approx(-1.0)
    assert out.loc[("suffix", "delta_neg"), "rho"] == pytest.approx(1.0)
    ci = out.loc[("prefix", "delta_pos"), ["ci_low", "ci_high"]].tolist()
    assert ci == pytest.approx([1.0, 1.0])  # every trajectory resample keeps the order
    assert (out["n_turns"] == 12).all() and (out["n_traj"] == 12).all()
    err = out.loc[("error", "delta_pos")]
    assert -1.0 <= err["ci_low"] <= err["rho"] <= err["ci_high"] <= 1.0


def test_regional_alignment_skips_without_failed_boundaries():
    rec = _regional_records().assign(error_turn_writer=-1)
    res = regional_alignment(rec, n_boot=10)
    assert isinstance(res, Skipped) and "writer boundary" in res.reason


def test_value_alignment_covariance_and_gain():
    rec = pd.DataFrame([_turn(traj=0, action="a", gate_mean=0.2, **{"return": 0.0}),
                        _turn(traj=1, action="b", gate_mean=0.8, **{"return": 1.0}),
                        _turn(traj=2, state_key="z", gate_mean=np.nan, **{"return": 5.0})])
    row = value_alignment(rec).iloc[0]
    assert row["n_turns"] == 2 and row["gate_mean"] == pytest.approx(0.5)
    assert row["cov"] == pytest.approx(0.15) and row["gain"] == pytest.approx(0.3)
    assert row["cov_within_state"] == pytest.approx(0.15)
    assert isinstance(value_alignment(rec.assign(gate_mean=np.nan)), Skipped)


def _stale_runs():
    return pd.DataFrame({"run_id": ["fresh", "stale"], "method": "seed", "env": "household",
                         "backbone": "tiny", "seed": 0, "algo.beta_opd": 5.0,
                         "writer.refresh_every": [1, 0]})


def test_staleness_reproduces_the_eq14_example():
    # SEED review: Delta 0.80 (current) vs 0.30 (stale), beta 5 -> |g gap| 0.1644, bound 0.625.
    rec = pd.DataFrame([_turn(run_id="fresh", delta_pos=0.8), _turn(run_id="stale", delta_pos=0.3),
                        _turn(run_id="stale", state_key="unmatched", delta_pos=0.0)])
    out = staleness(_stale_runs(), rec)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["refresh_every"] == 0 and row["n_matched"] == 1
    assert row["gate_discrepancy"] == pytest.approx(0.1644, abs=1e-4)
    assert row["bound"] == pytest.approx(0.625)
    one_level = _stale_runs().assign(**{"writer.refresh_every": 1})
    assert isinstance(staleness(one_level, rec), Skipped)


def test_writer_reliability_rates():
    cases = [(2, 2), (1, 3), (-1, 1), (2, -1), (-1, -1)]  # (writer, true) per failed traj
    rows = [_turn(traj=i, error_turn_writer=w, error_turn_true=t) for i, (w, t) in enumerate(cases)]
    rows.append(_turn(traj=9, success=True, error_turn_writer=3, error_turn_true=-1))
    rows.append(_turn(traj=0, turn=1, error_turn_writer=2, error_turn_true=2))  # same traj
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


def test_staleness_pairs_by_cell_and_refresh_not_by_method_name():
    """seed (refresh 1) and seed_stale (refresh 0) of the same cell pair; a stale run of a
    different cell (another lambda_opd) does not."""
    runs = pd.DataFrame({"run_id": ["fresh", "stale", "other"], "method": ["seed", "seed_stale", "seed_stale"],
                         "algo.method": ["seed", "seed_stale", "seed_stale"], "env": "household",
                         "backbone": "tiny", "seed": 0, "algo.beta_opd": 5.0,
                         "algo.lambda_opd": [0.01, 0.01, 0.5], "output.dir": ["a", "b", "c"],
                         "writer.refresh_every": [1, 0, 0]})
    rec = pd.DataFrame([_turn(run_id="fresh", delta_pos=0.8), _turn(run_id="stale", delta_pos=0.3),
                        _turn(run_id="other", delta_pos=0.0)])
    out = staleness(runs, rec)
    assert not isinstance(out, Skipped), out
    assert list(out["run_id"]) == ["stale"] and list(out["ref_run_id"]) == ["fresh"]
    assert list(out["method"]) == ["seed_stale"]
    assert out.iloc[0]["gate_discrepancy"] == pytest.approx(0.1644, abs=1e-4)
