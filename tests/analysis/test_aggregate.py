"""analysis.aggregate: rliable's aggregates on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import (
    aggregates,
    performance_profile,
    probability_of_improvement,
    task_scores,
)


def test_probability_of_improvement_hand_computed():
    p, low, high = probability_of_improvement({"a": [1.0, 2.0]}, {"a": [0.0, 2.0]}, n_boot=500)
    assert p == pytest.approx(0.625)
    assert 0.0 <= low <= p <= high <= 1.0
    # Two tasks: X always wins on "a" (1.0), always ties on "b" (0.5) -> 0.75.
    p, low, high = probability_of_improvement({"a": [2.0, 3.0], "b": [1.0, 1.0]},
                                              {"a": [0.0, 1.0], "b": [1.0, 1.0], "c": [5.0]})
    assert (p, low, high) == (0.75, 0.75, 0.75)  # no resample can change it
    assert all(math.isnan(v) for v in probability_of_improvement({"a": [1.0]}, {"b": [1.0]}))


def test_performance_profile_weighs_tasks_equally():
    prof = performance_profile({"a": [0.2, 0.6], "b": [0.9, 0.9, 0.9, 0.1]}, [0.0, 0.5, 0.95],
                               n_boot=300)
    # tau 0.5: task a 1/2, task b 3/4 -> 0.625; tau 0: 1; tau 0.95: 0
    np.testing.assert_allclose(prof["fraction"], [1.0, 0.625, 0.0])
    assert prof.loc[1, "low"] <= 0.625 <= prof.loc[1, "high"] and prof.loc[0, "low"] == 1.0


def test_task_scores_and_aggregates_rows():
    runs = pd.DataFrame({"row": ["g"] * 3 + ["s"] * 3, "seed": [0, 1, 2] * 2,
                         "t1": [0.1, 0.2, 0.3, 0.5, 0.6, 0.7], "t2": [np.nan] * 3 + [0.9] * 3})
    scores = task_scores(runs, "row", ["t1", "t2"])
    assert set(scores["g"]) == {"t1"} and set(scores["s"]) == {"t1", "t2"}
    out = aggregates(scores, "g", n_boot=200).set_index("row")
    assert out.loc["s", "n_tasks"] == 2 and out.loc["s", "p_improve"] == 1.0  # on t1 only
    assert out.loc["g", "iqm"] == pytest.approx(0.2) and math.isnan(out.loc["g", "p_improve"])


def test_rank_sum_form_equals_the_pairwise_count():
    from analysis.aggregate import _mann_whitney, _mann_whitney_rows

    rng = np.random.default_rng(0)
    xa = rng.integers(0, 4, size=(50, 5)).astype(float)  # many ties
    yb = rng.integers(0, 4, size=(50, 7)).astype(float)
    np.testing.assert_allclose(_mann_whitney_rows(xa, yb),
                               [_mann_whitney(x, y) for x, y in zip(xa, yb)])


def test_fraction_above_by_bins_equals_the_direct_count():
    from analysis.aggregate import _above

    rng = np.random.default_rng(1)
    draw = rng.choice([0.0, 0.25, 0.5, 0.8, 1.0], size=(40, 9))
    taus = np.linspace(0, 1, 21)
    np.testing.assert_allclose(_above(draw, taus), (draw[:, :, None] > taus).mean(axis=1))
