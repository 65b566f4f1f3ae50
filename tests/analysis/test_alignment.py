"""analysis.alignment on constructed per-turn records: GiGPO step advantages, the regional
alignment (ETRO Fig. 1) with its undefined and between-task cases, where the skill lands, and
a planted-sign calibration of the whole chain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.alignment import delta_profile, gate_over_beta, regional_alignment, step_advantages
from analysis.diagnostics import Skipped
from support.records_fakes import PLANTED, planted_records, planted_spearman


def test_step_advantages_pool_returns_and_filter_groups(turn):
    rec = pd.DataFrame([
        turn(traj=0, state_key="s0", action="a", **{"return": 1.0}),
        turn(traj=1, state_key="s0", action="a", **{"return": 0.5}),
        turn(traj=2, state_key="s0", action="b", **{"return": 0.0}),
        turn(traj=0, turn=1, state_key="s1", action="a", **{"return": 0.9}),  # singleton
        turn(traj=1, turn=1, state_key="s2", action="c", **{"return": 0.3}),  # one action
        turn(traj=2, turn=1, state_key="s2", action="c", **{"return": 0.1}),
        turn(task_id="t1", traj=3, state_key="s0", action="b", **{"return": 7.0}),
    ])
    out = step_advantages(rec)
    assert out["traj"].tolist() == [0, 1, 2]  # only task t0's anchor s0 survives
    assert out["q_hat"].tolist() == pytest.approx([0.75, 0.75, 0.0])
    assert out["anchor_mean"].tolist() == pytest.approx([0.5] * 3)
    assert out["step_adv"].tolist() == pytest.approx([0.25, 0.25, -0.5])
    assert isinstance(step_advantages(rec.iloc[3:6]), Skipped)
    assert isinstance(step_advantages(rec.drop(columns="state_key")), Skipped)


def test_gigpo_variants_use_each_turns_own_return_and_keep_singletons(turn):
    """verl-agent's GiGPO: own return minus the anchor mean (std-normalised in gigpo_std),
    singleton anchors at 0 and kept; the invalid-step penalty counts at its own turn only."""
    rec = pd.DataFrame([
        # traj 0: invalid first turn (penalty 0.1), then success; traj 1, 2: no reward
        turn(traj=0, turn=0, state_key="s0", action="a", reward=-0.1),
        turn(traj=0, turn=1, state_key="s1", action="a", reward=1.0),
        turn(traj=1, turn=0, state_key="s0", action="a"),
        turn(traj=2, turn=0, state_key="s0", action="b"),
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


def _regional_records(turn, n_tasks=12):
    """Per task: a success and a failure (boundary k=1) through the same states p, e, s.

    The failure's step advantage at each state is (G_fail - G_succ) / 2; delta_pos is set to
    rise with it before the error and fall with it after, so rho is +1 (prefix), -1 (suffix).
    """
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n_tasks):
        for t, state in enumerate("pes"):
            g_fail = 0.05 * i + 0.01 * t
            adv = (g_fail - 1.0) / 2.0
            dpos = {"p": adv, "e": rng.normal(), "s": -adv}[state]
            rows.append(turn(task_id=f"t{i}", traj=2 * i, turn=t, state_key=state,
                             action="ok", success=True, **{"return": 1.0}))
            rows.append(turn(task_id=f"t{i}", traj=2 * i + 1, turn=t, state_key=state,
                             action="alt", error_turn_writer=1, delta_pos=dpos,
                             delta_neg=2 * adv, **{"return": g_fail}))
    return pd.DataFrame(rows)


def test_regional_alignment_signs_counts_and_cluster_ci(turn):
    out = regional_alignment(_regional_records(turn), n_boot=300).set_index(["region", "polarity"])
    assert out.loc[("prefix", "delta_pos"), "rho"] == pytest.approx(1.0)
    assert out.loc[("suffix", "delta_pos"), "rho"] == pytest.approx(-1.0)
    assert out.loc[("suffix", "delta_neg"), "rho"] == pytest.approx(1.0)
    ci = out.loc[("prefix", "delta_pos"), ["ci_low", "ci_high"]].tolist()
    assert ci == pytest.approx([1.0, 1.0])  # every trajectory resample keeps the order
    assert (out["n_turns"] == 12).all() and (out["n_traj"] == 12).all()
    err = out.loc[("error", "delta_pos")]
    assert -1.0 <= err["ci_low"] <= err["rho"] <= err["ci_high"] <= 1.0


def test_regional_alignment_skips_without_failed_boundaries(turn):
    rec = _regional_records(turn).assign(error_turn_writer=-1)
    res = regional_alignment(rec, n_boot=10)
    assert isinstance(res, Skipped) and "writer boundary" in res.reason


# -- undefined and between-task correlations (DESIGN.md, Diagnostics) ----------------------


def test_undefined_correlations_say_why_and_are_never_zero(turn):
    """A lost suffix (every action after the error ends at return 0) and a one-turn prefix
    give NaN with the reason, never 0."""
    rows = []
    for i in range(6):
        for t, state in enumerate("pes"):
            ret_fail = {"p": 0.1 * i, "e": -0.2 * i, "s": 0.0}[state]
            rows.append(turn(task_id=f"t{i}", traj=2 * i, turn=t, state_key=state, action="ok",
                             success=True, **{"return": 1.0}))
            rows.append(turn(task_id=f"t{i}", traj=2 * i + 1, turn=t, state_key=state, action="bad",
                             error_turn_writer=1, delta_pos=0.1 * t + 0.01 * i, delta_neg=0.3,
                             **{"return": ret_fail}))
    rec = pd.DataFrame(rows)
    rec.loc[(rec["traj"] == 1) & (rec["turn"] == 2), "return"] = 0.5  # one suffix turn differs
    out = regional_alignment(rec, n_boot=50).set_index(["region", "polarity"])
    suffix = out.loc[("suffix", "delta_pos")]
    assert suffix["n_turns"] == 6 and np.isfinite(suffix["rho"])  # defined: one return differs
    lost = regional_alignment(rec.assign(**{"return": rec["return"].where(rec["turn"] != 2, 0.0)}),
                              n_boot=50).set_index(["region", "polarity"])
    for polarity in ("delta_pos", "delta_neg"):
        row = lost.loc[("suffix", polarity)]
        assert np.isnan(row["rho"]) and "outcome is settled" in row["reason"]
    err = out.loc[("error", "delta_neg")]  # Delta- is 0.3 on every error turn
    assert np.isnan(err["rho"]) and err["reason"].startswith("Δ− constant over the 6 turns")
    assert out.loc[("error", "delta_pos"), "reason"] == ""
    few = regional_alignment(rec[rec["task_id"].isin(["t0", "t1"])], n_boot=50)
    assert set(few["reason"]) == {"2 turns (a rank correlation needs 3)"}
    assert few["rho"].isna().all()


def test_a_correlation_between_tasks_only_is_flagged(turn):
    """Every failed trajectory of a task takes the same wrong move at its error, so the step
    advantage is constant within a task: rho compares tasks (flagged); a second wrong move
    on one task makes it vary within that task (not flagged)."""
    rows = []
    for i in range(5):
        rows.append(turn(task_id=f"t{i}", traj=0, state_key="s", action="right", success=True,
                         **{"return": 1.0}))
        for j in (1, 2):
            rows.append(turn(task_id=f"t{i}", traj=j, state_key="s", action="wrong",
                             error_turn_writer=0, delta_neg=0.1 * i + 0.01 * j,
                             **{"return": -0.1 * i}))
    rec = pd.DataFrame(rows)
    row = regional_alignment(rec, n_boot=50).set_index(["region", "polarity"]).loc[("error", "delta_neg")]
    assert row["n_turns"] == 10 and row["n_tasks"] == 5 and np.isfinite(row["rho"])
    assert bool(row["between_tasks_only"])
    varied = rec.copy()
    varied.loc[(varied["task_id"] == "t3") & (varied["traj"] == 2), ["action", "return"]] = ["worse", -1.0]
    row = regional_alignment(varied, n_boot=50).set_index(["region", "polarity"]).loc[("error", "delta_neg")]
    assert not bool(row["between_tasks_only"])


# -- the planted-sign calibration (issue 43) ------------------------------------------------

def test_planted_signs_are_recovered_and_covered_at_the_nominal_rate():
    """Over repeated draws the diagnostic recovers each planted sign and its 95% interval
    covers the planted Spearman rho about 95% of the time. Flipping any one convention (the
    step advantage's sign, the regions' side of the boundary, the two polarities) breaks it."""
    rng = np.random.default_rng(43)
    draws, covered, signs = 60, {}, {}
    for _ in range(draws):
        out = regional_alignment(planted_records(rng), n_boot=400,
                                 seed=int(rng.integers(1 << 30))).set_index(["region", "polarity"])
        for key, r in PLANTED.items():
            row, target = out.loc[key], planted_spearman(r)
            covered[key] = covered.get(key, 0) + int(row["ci_low"] <= target <= row["ci_high"])
            signs[key] = signs.get(key, 0) + int(np.sign(row["rho"]) == np.sign(target))
    for key, r in PLANTED.items():
        assert covered[key] / draws >= 0.85, (key, covered[key])  # nominal 0.95; 60 draws
        if r:
            assert signs[key] == draws, (key, signs[key])


# -- where the skill lands, and the gate over beta from the recorded Delta -----------------


def test_delta_profile_puts_the_skill_where_it_moves_the_tokens(turn):
    """A skill that moves turn 0 only peaks at turn 0; on failed trajectories the offset axis
    counts from the writer's boundary (0 = the diagnosed error)."""
    rows = []
    for traj in range(4):
        failed = traj % 2 == 1
        for t in range(3):
            rows.append(turn(traj=traj, turn=t, success=not failed, error_turn_writer=1 if failed else -1,
                             delta_pos=-0.4 if t == 0 else 0.01, delta_neg=0.2 if failed and t == 1 else np.nan))
    out = delta_profile(pd.DataFrame(rows)).set_index(["axis", "position", "polarity"])
    assert out.loc[("turn", 0, "delta_pos"), "mean_abs"] == pytest.approx(0.4)
    assert out.loc[("turn", 1, "delta_pos"), "mean_abs"] == pytest.approx(0.01)
    assert out.loc[("turn", 0, "delta_pos"), "n_turns"] == 4
    assert out.loc[("offset", -1, "delta_pos"), "mean"] == pytest.approx(-0.4)  # turn 0 of the failures
    assert out.loc[("offset", 0, "delta_neg"), "n_turns"] == 2
    assert ("offset", 1, "delta_neg") not in out.index  # no Delta- after the error
    assert isinstance(delta_profile(pd.DataFrame([turn()])), Skipped)


def test_gate_over_beta_is_seeds_gate_of_the_recorded_delta(turn):
    """g = sigmoid(beta Delta+) per region and beta (beta 0: 1/2 everywhere); the Jensen gap is
    the trainer's per-token gate less the turn-mean gate, at the run's own beta only."""
    rows = [turn(traj=i, region="prefix", delta_pos=d, gate_mean=g)
            for i, (d, g) in enumerate([(-0.2, 0.30), (0.0, 0.50), (0.2, 0.74)])]
    out = gate_over_beta(pd.DataFrame(rows), [0.0, 5.0], beta_run=5.0).set_index(["region", "beta"])
    assert out.loc[("prefix", 0.0), "gate"] == pytest.approx(0.5)
    expected = np.mean(1 / (1 + np.exp(-5 * np.array([-0.2, 0.0, 0.2]))))
    assert out.loc[("prefix", 5.0), "gate"] == pytest.approx(expected)
    assert out.loc[("prefix", 5.0), "n_turns"] == 3
    assert out.loc[("prefix", 5.0), "jensen_gap"] == pytest.approx(np.mean([0.30, 0.50, 0.74]) - expected)
    assert np.isnan(out.loc[("prefix", 0.0), "jensen_gap"])
