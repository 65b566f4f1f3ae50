"""analysis.stats: hand-computed values and constructed cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis.stats import (
    bootstrap_ci,
    holm,
    iqm,
    iqm_ci,
    mean_std,
    paired_test,
    summarize,
    t_ci,
)


def test_mean_std_sample_std_and_single_value():
    assert mean_std([1.0, 2.0, 3.0, 4.0]) == pytest.approx((2.5, math.sqrt(5.0 / 3.0)))
    mean, std = mean_std([7.0, float("nan")])
    assert mean == 7.0 and math.isnan(std)


def test_bootstrap_ci_covers_mean_is_deterministic_and_nan_for_one_seed():
    x = [0.61, 0.72, 0.55, 0.80, 0.67]
    low, high = bootstrap_ci(x, n_boot=4000, seed=3)
    assert low < np.mean(x) < high
    assert min(x) <= low and high <= max(x)
    assert bootstrap_ci(x, n_boot=4000, seed=3) == (low, high)
    assert bootstrap_ci(x, n_boot=4000, seed=4) != (low, high)
    assert all(math.isnan(v) for v in bootstrap_ci([0.5]))
    # Two values: resampled means take only a, (a+b)/2 or b; the 95% interval spans a..b.
    assert bootstrap_ci([0.0, 1.0], n_boot=2000) == (0.0, 1.0)


def test_bootstrap_ci_rejects_bad_settings():
    with pytest.raises(ValueError, match="n_boot=0"):
        bootstrap_ci([1.0, 2.0], n_boot=0)
    with pytest.raises(ValueError, match="confidence=1.5"):
        bootstrap_ci([1.0, 2.0], confidence=1.5)


def test_iqm_known_vectors():
    assert iqm(np.arange(1, 9)) == 4.5  # drop 1,2 and 7,8
    assert iqm([1.0, 2.0, 3.0, 100.0]) == 2.5  # the outlier is trimmed
    assert iqm([[1, 2], [3, 4], [5, 6], [7, 8]]) == 4.5  # flattened like rliable


def test_iqm_ci_stratified_keeps_task_membership():
    # Task A always 0, task B always 1: every stratified resample has 2 zeros and 2 ones,
    # so the bootstrap IQM is constant; an unstratified resample would not be.
    point, low, high = iqm_ci([[0.0, 0.0], [1.0, 1.0]], n_boot=500, seed=0)
    assert (point, low, high) == (0.5, 0.5, 0.5)
    point, low, high = iqm_ci([np.linspace(0, 1, 8), np.linspace(2, 3, 4)], seed=1)
    assert low <= point <= high and low < high
    assert all(math.isnan(v) for v in iqm_ci([[1.0], [2.0]])[1:])


def test_holm_known_values():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.01, 0.02, 0.03, 0.04]), [0.04, 0.06, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])
    out = holm([0.02, float("nan"), 0.01])  # NaN is not part of the family
    np.testing.assert_allclose(out, [0.02, np.nan, 0.02])


def test_paired_test_pairs_by_seed_and_drops_unpaired():
    a = {0: 1.0, 1: 2.0, 2: 4.0, 3: 9.0}
    b = {0: 0.5, 1: 1.0, 2: 2.5, 5: 0.0}
    res = paired_test(a, b)
    assert res.n == 3
    assert res.mean_diff == pytest.approx((0.5 + 1.0 + 1.5) / 3)
    assert res.p_t == pytest.approx(sps.ttest_rel([1, 2, 4], [0.5, 1, 2.5]).pvalue)
    assert math.isnan(res.p_wilcoxon)  # n=3 cannot reach 0.05 (2/8)


def test_paired_test_wilcoxon_when_n_allows_and_degenerate_cases():
    a = {s: float(s) + 1.0 + 0.1 * s for s in range(6)}
    b = {s: float(s) for s in range(6)}
    res = paired_test(a, b)
    assert res.p_wilcoxon == pytest.approx(2.0 / 64)  # all 6 differences positive, exact
    assert paired_test({0: 1.0, 1: 1.0, 2: 1.0}, {0: 1.0, 1: 1.0, 2: 1.0}).p_t == 1.0
    assert math.isnan(paired_test({0: 1.0}, {0: 0.0}).p_t)


def test_paired_test_needs_three_pairs():
    # RLSD one task better than GRPO on each of 2 seeds: no test, no marker.
    res = paired_test({0: 0.51, 1: 0.61}, {0: 0.50, 1: 0.60})
    assert res.n == 2 and res.mean_diff == pytest.approx(0.01)
    assert math.isnan(res.p_t) and math.isnan(res.p_wilcoxon)
    assert not math.isnan(paired_test({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5}, min_n=2).p_t)


def test_constant_differences_get_the_sign_flip_p_without_warnings():
    import warnings

    a = {s: 0.1 * s + 1.0 / 134 for s in range(3)}  # every seed exactly one task better
    b = {s: 0.1 * s for s in range(3)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = paired_test(a, b)
        six = paired_test({s: 0.3 + s for s in range(6)}, {s: 0.2 + s for s in range(6)})
    assert res.p_t == pytest.approx(2.0 / 8) and math.isnan(res.p_wilcoxon)
    assert six.p_t == pytest.approx(2.0 / 64) and six.p_wilcoxon == pytest.approx(2.0 / 64)


def test_t_ci_hand_computed_and_does_not_collapse_at_two_seeds():
    # n = 2, values 0 and 1: mean 0.5, s = sqrt(0.5), t_{1, .975} = 12.7062
    low, high = t_ci([0.0, 1.0])
    half = 12.706204736 * math.sqrt(0.5) / math.sqrt(2)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert low < 0.0 and high > 1.0  # wider than [min, max], unlike the bootstrap
    low, high = t_ci([1.0, 2.0, 3.0, 4.0], confidence=0.9)
    half = sps.t.ppf(0.95, 3) * math.sqrt(5.0 / 3.0) / 2.0
    assert (low, high) == pytest.approx((2.5 - half, 2.5 + half))
    assert all(math.isnan(v) for v in t_ci([0.3]))
    assert t_ci([0.4, 0.4, 0.4]) == pytest.approx((0.4, 0.4))


def _frame():
    rows = []
    scores = {"grpo": [0.50, 0.52, 0.48, 0.51], "seed": [0.70, 0.73, 0.69, 0.72],
              "etro": [0.505, 0.50, 0.495, 0.515]}
    for env, shift in (("household", 0.0), ("shop", -0.2)):
        for method, vals in scores.items():
            rows += [{"env": env, "method": method, "seed": s, "success": v + shift}
                     for s, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_summarize_columns_baseline_holm_and_best():
    out = summarize(_frame(), by=["env", "method"], metric="success", baseline="grpo",
                    n_boot=500)
    assert list(out.columns[:2]) == ["env", "method"]
    assert len(out) == 6 and (out["n"] == 4).all()
    row = out.set_index(["env", "method"]).loc[("household", "seed")]
    assert row["mean"] == pytest.approx(0.71)
    assert row["n_paired"] == 4 and row["diff_vs_baseline"] == pytest.approx(0.2075)
    assert row["ci_low"] < 0.71 < row["ci_high"]
    assert row["significant"] and row["not_worse_than_best"]
    base = out[out["method"] == "grpo"]
    assert base["p_vs_baseline"].isna().all() and not base["significant"].any()
    family = out["p_vs_baseline"].dropna().to_numpy()
    np.testing.assert_allclose(out["p_holm"].dropna(), holm(family)[~np.isnan(family)])
    etro = out.set_index(["env", "method"]).loc[("household", "etro")]
    assert not etro["significant"] and not etro["not_worse_than_best"]


def test_summarize_lower_is_better_and_single_seed():
    frame = pd.DataFrame({"method": ["a", "b"], "seed": [0, 0], "len": [3.0, 5.0]})
    out = summarize(frame, by=["method"], metric="len", baseline="a", higher_is_better=False)
    # one seed: untestable, so neither row is called best
    assert out["not_worse_than_best"].tolist() == [False, False]
    assert out["ci_low"].isna().all() and out["std"].isna().all()
    assert math.isnan(out.loc[1, "p_vs_baseline"]) and out.loc[1, "n_paired"] == 1


def test_summarize_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="baseline='ppo'.*grpo"):
        summarize(_frame(), by=["method"], metric="success", baseline="ppo")
    with pytest.raises(ValueError, match=r"\['nope'\] not in the frame"):
        summarize(_frame(), by=["method"], metric="nope")
    with pytest.raises(ValueError, match="test='z'"):
        summarize(_frame(), by=["method"], metric="success", test="z")


def test_summarize_wilcoxon_choice_uses_the_exact_signed_rank_p():
    frame = pd.DataFrame({"method": ["grpo"] * 6 + ["seed"] * 6, "seed": list(range(6)) * 2,
                          "acc": [0.1 * s for s in range(6)] + [0.1 * s + 0.05 + 0.01 * s
                                                                for s in range(6)]})
    out = summarize(frame, by=["method"], metric="acc", baseline="grpo", test="wilcoxon")
    row = out.set_index("method").loc["seed"]
    assert row["p_vs_baseline"] == pytest.approx(2.0 / 64) and row["p_holm"] == row["p_vs_baseline"]
    assert row["significant"] and row["n_paired"] == 6


def test_summarize_n_counts_seeds_not_runs():
    # seed 0 of "a" was run twice: the two runs are averaged into one seed value.
    frame = pd.DataFrame({"method": ["a"] * 4, "seed": [0, 0, 1, 2],
                          "acc": [0.2, 0.4, 0.5, 0.6]})
    row = summarize(frame, by=["method"], metric="acc").iloc[0]
    assert row["n"] == 3 and row["mean"] == pytest.approx((0.3 + 0.5 + 0.6) / 3)
    low, high = t_ci([0.3, 0.5, 0.6])
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))


def test_summarize_untestable_rows_are_neither_marked_nor_not_worse():
    frame = pd.DataFrame({"method": ["grpo", "grpo", "rlsd", "rlsd", "big", "big"],
                          "seed": [0, 1] * 3, "acc": [0.5, 0.6, 0.51, 0.61, 0.9, 0.7]})
    out = summarize(frame, by=["method"], metric="acc", baseline="grpo").set_index("method")
    assert not out["significant"].any() and out["p_vs_baseline"].isna().all()
    # two seeds each: the highest mean ("big") is not called best on untestable evidence
    assert out["not_worse_than_best"].to_dict() == {"big": False, "grpo": False, "rlsd": False}
    assert out["p_vs_best"].isna().all()


def test_the_best_is_chosen_among_rows_with_enough_seeds():
    # "two" has the highest mean on 2 seeds (an interrupted run); the best is "a" (3 seeds),
    # "b" is tested against "a", and "two" is neither best nor not-worse.
    frame = pd.DataFrame({"method": ["a"] * 3 + ["b"] * 3 + ["two"] * 2,
                          "seed": [0, 1, 2, 0, 1, 2, 0, 1],
                          "acc": [0.60, 0.62, 0.64, 0.30, 0.33, 0.31, 0.95, 0.90]})
    out = summarize(frame, by=["method"], metric="acc").set_index("method")
    assert out["not_worse_than_best"].to_dict() == {"a": True, "b": False, "two": False}
    assert math.isnan(out.at["a", "p_vs_best"]) and out.at["b", "p_vs_best"] < 0.05
    assert math.isnan(out.at["two", "p_vs_best"])


def test_summarize_not_worse_uses_the_holm_corrected_test_against_the_best():
    seeds = range(4)
    best = [0.80, 0.82, 0.79, 0.81]
    rows = [("best", s, v) for s, v in zip(seeds, best)]
    rows += [("close", s, v - d) for s, v, d in zip(seeds, best, (0.01, -0.01, 0.02, 0.0))]
    rows += [("far", s, v - 0.3 - 0.01 * s) for s, v in zip(seeds, best)]
    frame = pd.DataFrame(rows, columns=["method", "seed", "acc"])
    out = summarize(frame, by=["method"], metric="acc").set_index("method")
    d_close = np.array([0.01, -0.01, 0.02, 0.0])
    d_far = np.array([0.3 + 0.01 * s for s in seeds])
    raw = [sps.ttest_1samp(d_close, 0).pvalue, sps.ttest_1samp(d_far, 0).pvalue]
    np.testing.assert_allclose(out.loc[["close", "far"], "p_vs_best"], holm(raw))
    assert out["not_worse_than_best"].to_dict() == {"best": True, "close": True, "far": False}
    assert math.isnan(out.loc["best", "p_vs_best"])


def test_summarize_swept_baseline_compares_within_matching_values():
    rows = []
    for beta, base, gain in ((1.0, 0.5, 0.1), (5.0, 0.2, 0.0)):
        for s, noise in enumerate((0.0, 0.01, -0.01, 0.02)):
            rows.append((f"grpo b={beta}", s, base + noise))
            rows.append((f"seed b={beta}", s, base + noise + gain + 0.001 * s))
    frame = pd.DataFrame(rows, columns=["variant", "seed", "acc"])
    mapping = {"seed b=1.0": "grpo b=1.0", "seed b=5.0": "grpo b=5.0"}
    out = summarize(frame, by=["variant"], metric="acc", baseline=mapping).set_index("variant")
    assert out.loc["seed b=1.0", "diff_vs_baseline"] == pytest.approx(0.1015)
    assert out.loc["seed b=5.0", "diff_vs_baseline"] == pytest.approx(0.0015)
    assert out.loc["seed b=1.0", "significant"] and out.loc["seed b=1.0", "n_paired"] == 4
    assert out.loc[["grpo b=1.0", "grpo b=5.0"], "n_paired"].tolist() == [0, 0]
    with pytest.raises(ValueError, match=r"baseline levels \['ppo'\]"):
        summarize(frame, by=["variant"], metric="acc", baseline={"seed b=1.0": "ppo"})


def test_per_cell_long_frame_over_seeds():
    from analysis.stats import per_cell

    frame = pd.DataFrame({"cell": ["a", "a", "a", "b"], "seed": [0, 0, 1, 0],
                          "x": [1.0, 3.0, 4.0, 5.0], "y": [np.nan, np.nan, np.nan, 1.0]})
    out = per_cell(frame, ["cell"], ["x", "y"]).set_index(["cell", "column"])
    assert out.loc[("a", "x"), "n"] == 2 and out.loc[("a", "x"), "mean"] == 3.0
    assert (out.loc[("a", "x"), "ci_low"], out.loc[("a", "x"), "ci_high"]) == pytest.approx(
        t_ci([2.0, 4.0]))
    assert ("a", "y") not in out.index and out.loc[("b", "y"), "n"] == 1
    with pytest.raises(ValueError, match=r"\['z'\] not in the frame"):
        per_cell(frame, ["cell"], ["z"])


def test_summarize_gives_the_mde_of_each_tested_comparison():
    """The minimum detectable effect of each tested comparison: power 0.8 at Holm's first
    step over the family (the finite p-values), at the comparison's n and SD of paired
    differences; NaN for the baseline and for comparisons with too few pairs."""
    from analysis.power import mde_of

    frame = _frame()
    out = summarize(frame, by=["env", "method"], metric="success", baseline="grpo", n_boot=200)
    tested = out["p_vs_baseline"].notna()
    assert out.loc[~tested, "mde_vs_baseline"].isna().all()
    family = int(tested.sum())
    per_seed = frame.groupby(["env", "method", "seed"])["success"].mean()
    for _, row in out[tested].iterrows():
        a = per_seed.loc[(row["env"], row["method"])]
        b = per_seed.loc[(row["env"], "grpo")]
        d = (a - b).dropna().to_numpy()
        assert row["mde_vs_baseline"] == pytest.approx(mde_of(d, family, 0.05))
        assert row["mde_vs_baseline"] > 0
