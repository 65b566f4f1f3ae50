"""One sleeping engine a process: a writer snapshot's vLLM engine never sleeps, whatever
``model.vllm.sleep_level`` says, so that the policy engine's ``sleep()`` cannot unmap it."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from support.paths import DATA
from trainer.run import components
from trainer.run.engines import Engine, engine_plan, snapshot_engine_config
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"


def _cfg(*overrides: str):
    return resolve(load_config(MICRO, list(overrides)))


@pytest.mark.parametrize("level", [1, 2])
def test_seed_stale_on_vllm_plans_one_sleeping_engine(level):
    cfg = _cfg("algo.method=seed_stale", "model.backend=vllm", f"model.vllm.sleep_level={level}")
    assert cfg.writer.keeps_snapshot  # seed_stale never refreshes its self writer
    assert engine_plan(cfg) == (Engine("policy", level), Engine("writer snapshot", 0))


@pytest.mark.parametrize("overrides", [
    ("algo.method=seed",),  # the self writer writes with the policy: one engine
    ("algo.method=grpo",),
    ("algo.method=seed_stale", "model.backend=transformers"),
    ("algo.method=seed", "writer.kind=frozen"),
    ("algo.method=seed", "writer.refresh_every=3"),
])
def test_no_plan_has_two_sleeping_engines(overrides):
    cfg = _cfg("model.backend=vllm", *overrides)
    plan = engine_plan(cfg)
    assert sum(e.sleep_level > 0 for e in plan) <= 1
    assert len(plan) == (0 if cfg.model.backend != "vllm" else 1 + cfg.writer.keeps_snapshot)


def test_the_snapshot_backend_is_built_without_sleep(monkeypatch, caplog):
    cfg = _cfg("algo.method=seed_stale", "model.backend=vllm", "model.vllm.sleep_level=2")
    built = []
    monkeypatch.setattr(components, "make_backend", lambda model_cfg, model, *a, **k: built.append(model_cfg) or model)
    policy, snapshot, policy_backend = object(), object(), object()
    ctx = SimpleNamespace(cfg=cfg, model=policy, backend=policy_backend)
    factory = components.writer_backends(ctx, tokenizer=None, vision=None)
    assert factory(policy) is policy_backend  # the policy's own engine: nothing new built
    with caplog.at_level(logging.WARNING, logger="hindsight"):
        assert factory(snapshot) is snapshot
    assert [m.vllm.sleep_level for m in built] == [0]
    assert built[0].vllm.gpu_memory_utilization == cfg.model.vllm.gpu_memory_utilization  # only sleep changes
    assert "model.vllm.sleep_level=2" in caplog.text and "writer.refresh_every=0" in caplog.text


def test_sleep_off_leaves_the_settings_alone():
    cfg = _cfg("algo.method=seed_stale", "model.backend=vllm", "model.vllm.sleep_level=0")
    assert snapshot_engine_config(cfg) is cfg.model
