"""scripts/bench_trainer.py times the demo's whole trial per method beside the RL step."""

from __future__ import annotations

import importlib.util
import time

from support.paths import DATA, ROOT
from trainer.run.resolve import load_config


def bench():
    spec = importlib.util.spec_from_file_location("bench_trainer", ROOT / "scripts" / "bench_trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_trial_is_the_demos():
    cfg = bench().demo_trial_config([])
    assert (cfg.env.name, cfg.stages.rl.steps, cfg.eval.every) == ("ezpoints", 10, 10)
    assert cfg.rollout.tasks_per_step * cfg.rollout.group_size == 64 and cfg.eval.max_tasks == 100


def test_a_trial_is_timed_whole_and_by_stage(tmp_path):
    cfg = load_config(DATA / "train_micro.yaml", ["stages.rl.steps=1", "eval.max_tasks=1"])
    seconds, cpu, stages = bench().trial_seconds(cfg, "seed", tmp_path)
    for stage in ("skill_sft", "writer_panel", "rollout", "write", "update", "eval"):
        assert stages[stage] > 0, stage
    assert 0 < sum(stages.values()) <= cpu and seconds > 0  # the phases on the CPU clock, disjoint
    assert bench().trainer.stages.phases.time is time  # the wall clock again
