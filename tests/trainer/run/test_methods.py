"""Every registered method trains end to end through the real trainer (micro backbone), and
the main methods run on all three built-in environments."""

from __future__ import annotations

import pytest

from support.paths import DATA
from trainer.algos import get_method, method_names
from trainer.run.resolve import load_config
from trainer.run.store import make_client

MICRO = DATA / "train_micro.yaml"


def run_micro(tmp_path, method: str, env: str):
    from trainer.run.loop import train

    cfg = load_config(MICRO, [
        f"algo.method={method}", f"env.name={env}", "stages.rl.steps=1", "eval.max_tasks=1",
        "model.max_prompt_tokens=4096",
        f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}",
        "eval.splits=[" + {"household": "eval_unseen", "shop": "eval", "searchqa": "nq"}[env] + "]",
    ])
    result = train(cfg, progress=False)
    run = make_client(cfg.tracking.uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    return run.data.metrics


@pytest.mark.slow
@pytest.mark.parametrize("method", method_names())
def test_every_method_trains_on_household(tmp_path, method):
    metrics = run_micro(tmp_path, method, "household")
    spec = get_method(method)
    if spec.trains:
        assert "loss/total" in metrics and "train/success" in metrics
    else:
        assert "train/success" not in metrics  # evaluation-only baselines
    assert any(k.startswith("eval/") for k in metrics)
    if spec.trains and spec.skills:
        assert "writer/invalid_rate" in metrics
    if spec.skill_sft:  # SEED's Stage 1 ran (seed_no_self_evolving: Stage 1, then plain GRPO)
        assert "sft/acceptance_rate" in metrics
    if spec.trains and not spec.skills:
        assert "time/teacher_s" not in metrics or metrics["time/teacher_s"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("env", ["shop", "searchqa"])
@pytest.mark.parametrize("method", ["grpo", "seed", "etro"])
def test_main_methods_train_on_every_builtin_env(tmp_path, method, env):
    metrics = run_micro(tmp_path, method, env)
    assert "loss/total" in metrics


def test_etro_trains_on_searchqa(tmp_path):
    metrics = run_micro(tmp_path, "etro", "searchqa")
    assert {"loss/total", "time/teacher_s", "eval/nq/success"} <= set(metrics)
