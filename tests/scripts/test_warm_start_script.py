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
