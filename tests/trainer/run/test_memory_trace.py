"""trainer/run/memory_trace.py: one update and one score phase traced on fake tensors (no memory allocated) at
a small shape, 1 and 2 ranks: what the trace must hold by the trainer's own layout, and the planner against it."""

from __future__ import annotations

import pytest

from support.paths import DATA
from trainer.run.memory import plan_memory, scoring_batch, training_batches
from trainer.run.memory_trace import UNTRACKED, trace_memory
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"
# A small Qwen2 planned for a GPU: bf16 compute, checkpointing, 4 sequences of 512 + 256 tokens a micro-batch.
SMALL = ["model.tiny={hidden_size: 256, num_layers: 4, num_heads: 4, num_kv_heads: 2, intermediate_size: 704, "
         "vocab_size: 4096, max_position_embeddings: 4096}", "model.device=cuda", "model.dtype=bfloat16",
         "model.backend=transformers", "model.gradient_checkpointing=true", "model.max_prompt_tokens=512",
         "rollout.max_new_tokens=256", "algo.micro_batch_size=4", "algo.kl_coef=0.01",
         "stages.warm_start.enabled=false"]
MIB = 2**20


def small(workers: int = 1, *extra: str):
    return resolve(load_config(MICRO, [*SMALL, f"parallel.workers={workers}", *extra]))


def test_the_trace_runs_the_planners_micro_batches():
    """The update trains on turns, the prompt and the response (with Stage 1's replay, on the writer's
    examples too: its prompt and hindsight); the score phase scores turns (the teacher's: with the skill).
    A window context scores one response a sequence; a full context every turn's, at most all but its first token."""
    assert training_batches(small(1, "env.context=window"))["update"] == (4, 512 + 256, 256)
    assert training_batches(small(1, "env.context=full", "env.max_turns=2"))["update"] == (4, 512 + 256, 512)
    assert training_batches(small(1, "env.context=full", "env.max_turns=5"))["update"] == (4, 512 + 256, 767)
    seed = small(1, "algo.method=seed", "writer.max_new_tokens=1024", "env.context=window")
    assert seed.stages.skill_sft.enabled and training_batches(seed)["update"] == (4, 512 + 256, 256)
    assert training_batches(seed)["stage1"][1:] == (512 + 1024, 1024)
    replay = small(1, "algo.method=seed", "writer.max_new_tokens=1024", "stages.skill_sft.replay=0.5",
                   "env.context=window")
    assert training_batches(replay)["update"] == (4, 512 + 1024, 1024)
    assert scoring_batch(seed) == (4, 512 + 256 + (seed.writer.max_skill_tokens if seed.algo.teacher == "old" else 0),
                                   256)


@pytest.fixture(scope="module")
def traces():
    return {workers: trace_memory(small(workers)) for workers in (1, 2)}


@pytest.mark.slow
def test_one_rank_holds_the_whole_state_at_the_step(traces):
    """At AdamW's step: the float32 masters (4P) and gradients (4P), both moments (8P), foreach AdamW's
    float32 temporary (4P, its sqrt of the second moment) and the bf16 reference (2P): 22P."""
    trace = traces[1]
    p = trace.params
    assert p == 4_002_048  # 4096 x 256 tied embeddings, 4 layers of 737,536, the final norm
    assert trace.step.peak == pytest.approx(22 * p, rel=0.001)
    assert trace.update.peak == max(trace.step.peak, trace.backward.peak)
    assert trace.score.parts.get("Gradient", 0) == 0  # freed after the step, before the next scoring


@pytest.mark.slow
def test_a_rank_steps_on_its_shards_only(traces):
    """On 2 ranks the step holds half of each: 11P.  (Without the warm-up step, DTensor's first gradient norm
    derives its output shapes on whole-size fake gradients that the tracker would count: 15P.)"""
    trace = traces[2]
    assert trace.step.peak == pytest.approx(22 * trace.params / 2, rel=0.01)


@pytest.mark.slow
def test_ranks_hold_their_shard_and_gather_policy_and_reference_to_score(traces):
    """FSDP2 on 2 ranks: half the masters, moments and reference a rank (dim-0 shards, padded: within 1%);
    the score phase gathers the policy (bf16, MixedPrecisionPolicy) and the reference whole on top."""
    one, two = traces[1], traces[2]
    p = two.params
    assert p == one.params
    assert two.update.parts["Sharded Param"] == pytest.approx(4 * p / 2, rel=0.01)
    assert two.update.parts["OptState"] == pytest.approx(8 * p / 2, rel=0.01)
    assert two.update.parts[UNTRACKED] == pytest.approx(2 * p / 2, rel=0.01)
    assert two.score.parts["Unsharded Param"] == pytest.approx(2 * p, rel=0.01)  # the policy, gathered
    state = (4 + 8 + 2) * p / 2
    assert two.score.peak >= state + 2 * p + 2 * p  # and the reference, gathered
    assert two.update.peak < one.update.peak


def _ratio(cfg, trace, phase: str) -> float:
    """Planned over traced, without the plan's part no tensor holds (the CUDA context and allocator slack)."""
    plan = plan_memory(cfg, 80)
    runtime = sum(p.bytes for p in plan.parts if p.name.startswith("CUDA context"))
    return (plan.phase(phase) - runtime) / trace.phase(phase)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_the_planner_scores_as_traced(traces, workers):
    assert _ratio(small(workers), traces[workers], "score") == pytest.approx(1, abs=0.15)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_the_planner_updates_as_traced(traces, workers):
    assert _ratio(small(workers), traces[workers], "update") == pytest.approx(1, abs=0.15)
