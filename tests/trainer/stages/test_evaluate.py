"""Evaluation on the fixed panels (trainer/evaluate.py): avg@k sampling."""

from __future__ import annotations

import dataclasses

import pytest

from support.paths import DATA
from trainer.config import ConfigError
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    from trainer.run.components import build_components

    out = tmp_path_factory.mktemp("eval")
    return build_components(resolve(load_config(MICRO, [f"output.dir={out}", "eval.max_tasks=3"])))


def evaluate(ctx, **eval_fields):
    from trainer.stages.evaluate import evaluate_panels

    base = ctx.cfg
    ctx.cfg = dataclasses.replace(base, eval=dataclasses.replace(base.eval, **eval_fields))
    try:
        return evaluate_panels(ctx, step=0)
    finally:
        ctx.cfg = base


def episodes(records):
    """One row per episode: task_id, group, success."""
    return records.groupby("traj").agg(task_id=("task_id", "first"), group=("group", "first"),
                                       success=("success", "first"))


def test_sampled_evaluation_plays_every_task_k_times_and_averages_all_episodes(ctx):
    metrics, records = evaluate(ctx, temperature=1.0, samples=4)
    played = episodes(records)
    panel = [t.id for t in ctx.prompt_env.panel("eval_unseen")[:3]]
    assert sorted(played["task_id"]) == sorted(panel * 4)
    # a task's samples share one group id, and different tasks never do
    assert (played.groupby("group")["task_id"].nunique() == 1).all()
    assert played.groupby("group").size().tolist() == [4, 4, 4]
    assert metrics["eval/eval_unseen/success"] == pytest.approx(played["success"].astype(float).mean())


def test_greedy_evaluation_plays_each_task_once_whatever_samples_says(ctx):
    _, records = evaluate(ctx, temperature=0.0, samples=4)
    assert len(episodes(records)) == 3


def test_samples_below_one_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match="eval.samples"):
        load_config(MICRO, ["eval.samples=0"])
