"""analysis.curves: budget axes and bands over seeds, hand-computed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.curves import (
    RATE_LIMITS,
    bands,
    budgets,
    eval_gain,
    metric_curves,
    rate_limits,
    run_bands,
    training_bands,
)
from analysis.stats import t_ci


def _hist(rows):
    return pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])


def test_budgets_accumulate_episodes_and_tokens():
    runs = pd.DataFrame({"run_id": ["a"], "rollout.group_size": [4],
                         "rollout.tasks_per_step": [2]})
    hist = _hist([("a", "train/episode_length", 1, 5.0), ("a", "train/episode_length", 2, 3.0),
                  ("a", "perf/tokens_per_s", 1, 100.0), ("a", "time/rollout_s", 1, 2.0),
                  ("a", "perf/tokens_per_s", 2, 50.0), ("a", "time/rollout_s", 2, 4.0)])
    out = budgets(hist, runs).set_index("step")
    assert out.loc[1, "env_steps"] == 40.0 and out.loc[2, "env_steps"] == 40.0 + 24.0
    assert out.loc[1, "tokens"] == 200.0 and out.loc[2, "tokens"] == 400.0


def test_bands_average_runs_of_a_seed_then_use_the_t_interval():
    frame = pd.DataFrame({"label": "m", "step": 0, "seed": [0, 0, 1, 2],
                          "value": [0.1, 0.3, 0.5, 0.6]})
    row = bands(frame, ["label"]).iloc[0]
    assert row["n"] == 3 and row["mean"] == pytest.approx((0.2 + 0.5 + 0.6) / 3)
    assert (row["low"], row["high"]) == pytest.approx(t_ci([0.2, 0.5, 0.6]))


def test_a_success_rates_band_is_clipped_to_zero_one():
    """Two seeds at 0.05 and 0.95: the t interval is 0.5 +- 12.7 x 0.45 (about [-5.2, 6.2]);
    a rate's band stays in [0, 1], other metrics keep theirs."""
    frame = pd.DataFrame({"label": "m", "step": 0, "seed": [0, 1], "value": [0.05, 0.95]})
    low, high = t_ci([0.05, 0.95])
    assert low < -5 and high > 6
    row = bands(frame, ["label"], limits=RATE_LIMITS).iloc[0]
    assert (row["low"], row["high"], row["mean"]) == (0.0, 1.0, pytest.approx(0.5))
    assert tuple(bands(frame, ["label"]).iloc[0][["low", "high"]]) == pytest.approx((low, high))
    assert rate_limits("train/success") == rate_limits("eval/eval_unseen/success") == (0.0, 1.0)
    assert rate_limits("train/entropy") is None


def test_metric_curves_average_datasets_and_start_budgets_at_zero():
    runs = pd.DataFrame({"run_id": ["a", "b"], "seed": [0, 1], "variant": "seed",
                         "rollout.group_size": 2, "rollout.tasks_per_step": 1})
    rows = []
    for rid, shift in (("a", 0.0), ("b", 0.2)):
        rows += [(rid, "eval/nq/success", 0, 0.1 + shift), (rid, "eval/popqa/success", 0, 0.3 + shift),
                 (rid, "eval/nq/success", 1, 0.5 + shift), (rid, "eval/popqa/success", 1, 0.7 + shift),
                 (rid, "train/episode_length", 1, 3.0)]
    keys = pd.Series({"a": ("eval/nq/success", "eval/popqa/success"),
                      "b": ("eval/nq/success", "eval/popqa/success")})
    out = metric_curves(_hist(rows), runs, keys, by=["variant"]).set_index("step")
    assert out.loc[0, "mean"] == pytest.approx(0.3) and out.loc[1, "mean"] == pytest.approx(0.7)
    assert out.loc[0, "env_steps"] == 0.0 and out.loc[1, "env_steps"] == 6.0
    assert out.loc[1, "n"] == 2 and math.isnan(out.loc[1, "tokens"])


def test_eval_gain_pairs_the_warm_start_evaluation_with_the_last_one():
    rows = [("a", "eval/x/success", 0, 0.30), ("a", "eval/x/success", 10, 0.20),
            ("a", "eval/x/success", 20, 0.45), ("a", "train/success", 20, 0.9),
            ("b", "eval/x/success", 0, 0.40), ("b", "eval/x/success", 20, 0.35),
            ("c", "eval/x/success", 5, 0.40), ("c", "eval/x/success", 20, 0.50),  # no step 0
            ("d", "eval/x/success", 0, 0.40)]  # never evaluated after RL
    keys = pd.Series(dict.fromkeys("abcd", ("eval/x/success",)))
    out = eval_gain(_hist(rows), keys).set_index("run_id")
    assert list(out.index) == ["a", "b"]
    assert (out.loc["a", "first"], out.loc["a", "last"], out.loc["a", "last_step"]) == (0.30, 0.45, 20)
    assert out.loc["a", "gain"] == pytest.approx(0.15) and out.loc["a", "rose"] == 1.0
    assert out.loc["b", "gain"] == pytest.approx(-0.05) and out.loc["b", "rose"] == 0.0


def test_run_bands_mean_and_band():
    hist = pd.DataFrame({"run_id": ["a", "b", "c"], "method": "m", "key": "k", "step": 0,
                         "value": [0.0, 1.0, 2.0]})
    band = run_bands(hist, n_boot=500).iloc[0]
    assert band["n"] == 3 and band["mean"] == pytest.approx(1.0)
    assert 0.0 <= band["low"] < 1.0 < band["high"] <= 2.0


def test_training_bands_per_table_row_over_seeds():
    """Runs of one seed are averaged, seeds give the t interval, a success rate's is clipped
    to [0, 1], n_seeds counts the row's seeds; rows default to the method without a variant."""
    hist = pd.DataFrame({"run_id": ["a", "b", "c", "d", "a", "b"], "method": "m",
                         "env": "shop", "seed": [0, 0, 1, 2, 0, 0],
                         "key": ["train/success"] * 4 + ["train/entropy"] * 2,
                         "step": 1, "value": [0.1, 0.3, 0.5, 0.9, 2.0, 3.0]})
    out = training_bands(hist).set_index("key")
    rate = out.loc["train/success"]
    assert (rate["backbone"], rate["env_label"], rate["variant"]) == ("", "shop", "m")
    assert rate["n"] == 3 and rate["n_seeds"] == 3
    assert rate["mean"] == pytest.approx((0.2 + 0.5 + 0.9) / 3)
    low, high = t_ci([0.2, 0.5, 0.9])
    assert (rate["low"], rate["high"]) == pytest.approx((max(low, 0.0), min(high, 1.0)))
    entropy = out.loc["train/entropy"]
    assert entropy["n"] == 1 and entropy["mean"] == pytest.approx(2.5)
    assert math.isnan(entropy["low"])
    assert "train/success" in training_bands(hist.assign(key="x")).reason
    assert "lacks columns ['method']" in training_bands(hist.drop(columns="method")).reason


def test_the_writers_invalid_rate_per_step_is_a_clipped_training_curve_of_writer_rows_only():
    """SEED's self writer's validity through RL (issue 28, item 3): writer/invalid_rate is a
    training curve per step, banded like a rate (within [0, 1]); GRPO logs none, so no row."""
    hist = pd.DataFrame({"run_id": ["s0", "s1", "s0", "s1", "g0"], "method": ["seed"] * 4 + ["grpo"],
                         "seed": [0, 1, 0, 1, 0],
                         "key": ["writer/invalid_rate"] * 4 + ["train/success"],
                         "step": [1, 1, 2, 2, 1], "value": [0.05, 0.95, 0.6, 0.8, 0.5]})
    assert rate_limits("writer/invalid_rate") == (0.0, 1.0)
    out = training_bands(hist)
    writer = out[out["key"] == "writer/invalid_rate"].set_index("step")
    assert set(out[out["key"] == "writer/invalid_rate"]["method"]) == {"seed"}
    assert writer.loc[1, "mean"] == pytest.approx(0.5) and writer.loc[2, "mean"] == pytest.approx(0.7)
    assert (writer.loc[1, "low"], writer.loc[1, "high"]) == (0.0, 1.0)  # t at n = 2 leaves [0, 1]
