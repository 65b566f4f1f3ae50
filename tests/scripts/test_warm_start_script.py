"""scripts/warm_start.py (`make warm-start`) saves the bundle as soon as it is trained: an
evaluation cut short (a SmolLM2 card's panels take longer than its training on a shared
CPU) leaves the trained adapter, its settings and its training figures on disk."""

from __future__ import annotations

import importlib.util
import json

import pytest

import trainer.stages.evaluate
from support.paths import DATA, ROOT
from trainer.stages.warm_start import BUNDLE_META


def script():
    spec = importlib.util.spec_from_file_location("warm_start_script", ROOT / "scripts" / "warm_start.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bundle_is_saved_before_its_evaluation(tmp_path, monkeypatch):
    def cut_short(ctx, max_tasks):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer.stages.evaluate, "evaluate_policy", cut_short)
    with pytest.raises(KeyboardInterrupt):
        script().main([str(DATA / "train_micro.yaml"), "--out", str(tmp_path / "ws"), "--eval-tasks", "1"])
    meta = json.loads((tmp_path / "ws" / BUNDLE_META).read_text())
    assert meta["evaluation"] == {} and meta["metrics"]["warm/examples"] > 0
    assert (tmp_path / "ws" / "model.safetensors").is_file()


def test_the_card_gets_the_evaluation_and_the_weights_are_written_once(tmp_path, monkeypatch):
    import trainer.stages.skill_sft
    import trainer.stages.warm_start as warm_start

    saves = []
    real = warm_start.save_model
    monkeypatch.setattr(warm_start, "save_model", lambda *a, **k: saves.append(1) or real(*a, **k))
    monkeypatch.setattr(trainer.stages.evaluate, "evaluate_policy", lambda ctx, n: {"eval/success/greedy": 0.5})
    monkeypatch.setattr(trainer.stages.skill_sft, "writer_validity", lambda ctx: {"writer/panel_valid_rate": 0.25})
    assert script().main([str(DATA / "train_micro.yaml"), "--out", str(tmp_path / "ws"), "--eval-tasks", "1"]) == 0
    meta = json.loads((tmp_path / "ws" / BUNDLE_META).read_text())
    assert meta["evaluation"]["eval/success/greedy"] == 0.5 and meta["evaluation"]["panel_valid_rate"] == 0.25
    assert saves == [1] and (tmp_path / "ws" / "model.safetensors").is_file()
