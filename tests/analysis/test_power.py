"""Power of the paired t-test (analysis.power): hand-checked values, and the formula against
a simulation of the test itself with the CPU reference's seed SD."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis.power import (
    comparison_alpha,
    comparison_power,
    mde_of,
    min_detectable_effect,
    paired_power,
    sd_upper,
    seeds_needed,
)
from support.reference import reference_sd


def test_paired_power_matches_the_published_value():
    # G*Power, paired t, d = 1, n = 10, alpha 0.05 two-sided: 0.8031 (noncentral t, not the
    # normal approximation, which gives 0.885).
    assert paired_power(1.0, 1.0, 10, 0.05) == pytest.approx(0.8031, abs=5e-4)
    assert paired_power(0.0, 1.0, 10, 0.05) == pytest.approx(0.05, abs=1e-9)


def test_seeds_needed_and_mde_invert_each_other():
    assert seeds_needed(1.0, 1.0, 0.05) == 10  # 9 pairs give 0.759
    assert paired_power(1.0, 1.0, 9, 0.05) < 0.8
    mde = min_detectable_effect(1.0, 10, 0.05)
    assert paired_power(mde, 1.0, 10, 0.05) == pytest.approx(0.8, abs=1e-8)
    assert mde == pytest.approx(0.996, abs=1e-3)
    assert seeds_needed(0.0, 1.0, 0.05) is None
    assert math.isnan(min_detectable_effect(1.0, 1, 0.05))


def test_sd_upper_is_the_chi_square_limit():
    # sqrt(4 / chi2_{4, 0.2}) = sqrt(4 / 1.6488) = 1.5576
    assert sd_upper(1.0, 5, 0.8) == pytest.approx(1.5576, abs=1e-4)
    assert sd_upper(2.0, 5, 0.8) == pytest.approx(2 * 1.5576, abs=2e-4)
    assert math.isnan(sd_upper(1.0, 1))


def test_holm_first_step_and_errors_name_the_field():
    assert comparison_alpha(0.05, 4) == 0.0125
    with pytest.raises(ValueError, match=r"^comparisons=0; valid"):
        comparison_alpha(0.05, 0)
    with pytest.raises(ValueError, match=r"^alpha=1.5; valid"):
        paired_power(1.0, 1.0, 5, 1.5)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_power_formula_agrees_with_simulation(n):
    """The exact power against 4,000 simulated paired t-tests at the CPU reference's SD of
    paired differences, at the effect the test finds with power 0.5 (where a wrong formula
    would be furthest off), at Holm's first step over two comparisons."""
    sd = reference_sd()
    alpha = comparison_alpha(0.05, 2)
    effect = min_detectable_effect(sd, n, alpha, power=0.5)
    rng = np.random.default_rng(n)
    d = rng.normal(effect, sd, size=(4000, n))
    simulated = (sps.ttest_1samp(d, 0.0, axis=1).pvalue <= alpha).mean()
    assert abs(simulated - paired_power(effect, sd, n, alpha)) < 0.05
    # The normal approximation, which this module does not use, is off by more at n = 3.
    if n == 3:
        z = sps.norm.ppf(1 - alpha / 2)
        normal = sps.norm.sf(z - effect * math.sqrt(n) / sd)
        assert abs(simulated - normal) > 0.05


def test_comparison_power_per_comparison():
    per_seed = {"grpo": {0: 0.50, 1: 0.52, 2: 0.54}, "seed": {0: 0.51, 1: 0.55, 2: 0.55},
                "etro": {0: 0.50, 1: 0.52}}
    out = comparison_power(per_seed, {"seed": "grpo", "etro": "grpo"}, effect=0.03)
    seed = out.set_index("cell").loc["seed"]
    d = np.array([0.01, 0.03, 0.01])
    assert seed["n_paired"] == 3 and seed["mean_diff"] == pytest.approx(d.mean())
    assert seed["sd"] == pytest.approx(d.std(ddof=1))
    assert seed["alpha_each"] == 0.025
    assert seed["seeds_needed"] == seeds_needed(0.03, d.std(ddof=1), 0.025)
    assert seed["seeds_needed_upper"] >= seed["seeds_needed"]
    assert seed["mde"] == pytest.approx(mde_of(d, 2))
    etro = out.set_index("cell").loc["etro"]
    assert etro["n_paired"] == 2 and pd.isna(etro["seeds_needed"]) is False
    assert comparison_power({}, {"x": "grpo"}, effect=0.03)["n_paired"].tolist() == [0]
