"""A grid's ``seeds:`` plan: the key's parsing and errors, the rounds the sweep runs (from a
store's runs, without Ray: sweeps.sequential asks analysis.sequential), and the plan on the
parent run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sweeps.seeds import SeedsSpec
from sweeps.sequential import (
    cell_labels,
    comparisons,
    current_round,
    held_out_metric,
    round_trials,
    rule_text,
)
from sweeps.study import load_study
from trainer.config import ConfigError

BASE = {"model": {"backbone": "tiny"}}


def _study(tmp_path: Path, seeds=None, grid=None, **extra):
    data = {"name": "seq", "base": BASE, "out": "out",
            "grid": grid or {"algo.method": ["grpo", "seed", "etro"]}, **extra}
    if seeds is not None:
        data["seeds"] = seeds
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study(path)


def _run(value: float, status: str = "FINISHED"):
    return SimpleNamespace(info=SimpleNamespace(status=status, run_id="r"),
                           data=SimpleNamespace(metrics={"eval/eval_unseen/success": value}))


def _children(study, values: dict[str, list[float]]):
    """(cell id, seed) -> [a finished run with the method's value at that seed]."""
    cells = {t.cfg.algo.method: t.cell_id for t in round_trials(study, {})}
    return {(cells[m], study.seeds[i]): [_run(v)] for m, vs in values.items()
            for i, v in enumerate(vs)}


def test_the_key_parses_with_defaults_and_gives_the_seeds(tmp_path):
    study = _study(tmp_path, {"min": 3, "max": 6, "effect": 3})
    assert study.seeds_plan == SeedsSpec(min=3, max=6, effect=3.0)
    assert study.seeds == (0, 1, 2, 3, 4, 5)
    assert study.seeds_plan.plan.effect == pytest.approx(0.03)  # points -> metric units
    assert _study(tmp_path).seeds_plan is None


@pytest.mark.parametrize(("seeds", "grid", "message"), [
    ({"min": 1}, None, r"^study.yaml.seeds.min=1; valid: an integer >= 2$"),
    ({"max": 2}, None, r"^study.yaml.seeds.max=2; valid: an integer >= seeds.min \(3\)$"),
    ({"mni": 3}, None, r"^study.yaml.seeds: unknown key 'mni'"),
    ({"spending": "x"}, None, r"^study.yaml.seeds.spending='x'; valid: kim_demets, "),
    ({"effect": "big"}, None, r"^study.yaml.seeds.effect: expected a number, got 'big'$"),
    ({"baseline": "rlsd"}, None, r"^study.yaml.seeds.baseline: 'rlsd' is not a method of the "
                                 r"grid; valid: grpo, seed, etro$"),
    ({}, {"algo.method": ["grpo", "seed"], "seed": [0, 1]},
     r"^study.yaml.seeds: grid.seed and seeds cannot be combined"),
])
def test_bad_plans_are_one_line_errors(tmp_path, seeds, grid, message):
    with pytest.raises(ConfigError, match=message):
        _study(tmp_path, seeds, grid)


def test_rounds_add_seeds_only_where_undecided(tmp_path):
    study = _study(tmp_path, {"min": 3, "max": 5, "spending": "bonferroni"})
    pairs = comparisons(study)
    labels = cell_labels(study)
    assert sorted(labels[c] for c in pairs) == ["algo.method=etro", "algo.method=seed"]
    first = round_trials(study, {})
    assert sorted((t.cfg.algo.method, t.seed) for t in first) == sorted(
        (m, s) for m in ("grpo", "seed", "etro") for s in (0, 1, 2))
    # SEED far above GRPO on every seed (decided); ETRO around it (undecided): one more seed
    # for ETRO and for GRPO, none for SEED.
    children = _children(study, {"grpo": [0.50, 0.52, 0.48], "seed": [0.80, 0.81, 0.79],
                                 "etro": [0.51, 0.50, 0.50]})
    step = current_round(study, children)
    by_method = {t.cfg.algo.method: t.cell_id for t in first}
    assert step.looks[by_method["seed"]].state == "different"
    assert step.looks[by_method["etro"]].state == "undecided"
    nxt = round_trials(study, children)
    assert sorted((t.cfg.algo.method, t.seed) for t in nxt if t.seed == 3) == [("etro", 3), ("grpo", 3)]
    assert not any(t.seed == 4 for t in nxt)
    assert "bonferroni alpha spending" in rule_text(study)


def test_the_metric_defaults_to_the_held_out_success():
    assert held_out_metric(["eval/train/success", "eval/eval/success"]) == "eval/eval/success"
    assert held_out_metric(["eval/eval_seen/success", "eval/eval_unseen/success"]) == \
        "eval/eval_unseen/success"
    assert held_out_metric(["eval/train/success", "eval/test/success"]) == "eval/test/success"
    assert held_out_metric(["train/success"]) is None
