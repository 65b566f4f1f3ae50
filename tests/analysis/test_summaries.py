"""analysis.summaries on hand-built table rows: per-metric statistics, the swept-baseline
pairing, the per-seed average over envs and the no-metric case."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest

from analysis.stats import t_ci
from analysis.summaries import across_envs, baseline_map, summarize_rows


@dataclass(frozen=True)
class M:
    key: str
    env: str
    source: tuple[str, ...]
    group: str = "G"
    label: str = "L"
    role: str = "success"


def _rows(values, env="e", method="m", variant=None, params=()):
    return [{"run_id": f"{env}-{variant or method}-{s}", "env": env, "env_key": env,
             "backbone": "b", "method": method, "variant": variant or method,
             "variant_params": params, "seed": s, f"{env}.success": v, "final_success": v}
            for s, v in enumerate(values)]


def test_rows_are_summarised_per_metric_against_the_baseline():
    data = pd.DataFrame(_rows([0.5, 0.6, 0.7], method="grpo") + _rows([0.6, 0.8, 0.9]))
    out = summarize_rows(data, [M("e.success", "e", ("e.success",))], "grpo").set_index("variant")
    assert out.loc["m", "mean"] == pytest.approx(2.3 / 3)
    assert (out.loc["m", "ci_low"], out.loc["m", "ci_high"]) == pytest.approx(t_ci([0.6, 0.8, 0.9]))
    assert out.loc["m", "n_paired"] == 3 and out.loc["grpo", "n_paired"] == 0
    assert out.loc["m", "run_ids"] == ("e-m-0", "e-m-1", "e-m-2")
    assert (out.loc["m", "metric"], out.loc["m", "metric_role"], out.loc["m", "ci_method"]) == (
        "e.success", "success", "t")
    assert summarize_rows(data, [M("e.success", "other", ("e.success",))], "grpo") is None


def test_a_swept_baseline_is_matched_on_its_params():
    rows = pd.DataFrame([
        {"variant": "grpo (β=1)", "method": "grpo", "variant_params": (("b", 1.0),), "b": 1.0},
        {"variant": "grpo (β=5)", "method": "grpo", "variant_params": (("b", 5.0),), "b": 5.0},
        {"variant": "seed (β=5)", "method": "seed", "variant_params": (("b", 5.0),), "b": 5.0},
        {"variant": "etro", "method": "etro", "variant_params": (), "b": float("nan")}])
    assert baseline_map(rows, "grpo") == {"seed (β=5)": "grpo (β=5)"}
    assert baseline_map(rows, None) == {}


def test_the_average_over_envs_counts_seeds_that_ran_on_every_env():
    data = pd.DataFrame(_rows([0.2, 0.4], env="a") + _rows([0.6], env="b"))
    avg = M("avg.success", "avg", ("final_success",))
    out = across_envs(data, avg)
    assert list(out["seed"]) == [0] and out["avg.success"].iloc[0] == pytest.approx(0.4)
    assert out["env_key"].iloc[0] == "avg" and out["run_id"].iloc[0] == "a-m-0,b-m-0"
    assert across_envs(data[data["env"] == "a"], avg).empty
