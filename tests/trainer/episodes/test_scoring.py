"""Batched scoring: hand-computed log-probs, batched == looped, window/full equivalences,
the [B, T] collate layout and gradients."""

from __future__ import annotations

import pytest
import torch

from envs.base import Episode, Task, Turn, format_response
from support.tiny import SMALL
from trainer.episodes.samples import SampleBuilder, TokenSequence, Trajectory
from trainer.episodes.scoring import (
    MicroBatching,
    PaddingCount,
    collate_actions,
    counting,
    score_trajectories,
    sequence_logprobs,
)
from trainer.models.backbones import build_tiny_model, train_tokenizer
from trainer.models.chat import encode

SKILL = "Open the fridge only while holding the apple."


class FakeEnv:
    def system_prompt(self) -> str:
        return "You are a household agent. Reply as <think>...</think><action>...</action>."

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def format_observation(self, observation: str) -> str:
        return observation


def make_traj(tokenizer, n_turns: int, seed: int = 0) -> Trajectory:
    """A constructed trajectory whose response ids are a random mix of canonical encodings."""
    g = torch.Generator().manual_seed(seed)
    task = Task(
        id=f"household/train/{seed}",
        env="household",
        split="train",
        instruction="put an apple in fridge",
    )
    obs = [
        f"Location {t}: a mug {t}, a towel {int(torch.randint(9, (1,), generator=g))}."
        for t in range(n_turns + 1)
    ]
    acts = [f"go to shelf {int(torch.randint(9, (1,), generator=g))}" for _ in range(n_turns)]
    turns = [
        Turn(obs[t], format_response(acts[t]), acts[t], True, 0.0, obs[t + 1], str(t), None, None)
        for t in range(n_turns)
    ]
    ep = Episode(task=task, turns=turns, success=False, score=0.0, first_observation=obs[0])
    return Trajectory(ep, [encode(tokenizer, t.response) for t in turns])


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [FakeEnv().system_prompt(), SKILL] + [
        f"Location {i}: a mug {i}, a towel {i}. <think></think><action>go to shelf {i}</action>"
        for i in range(10)
    ] * 10
    return train_tokenizer(corpus, 400)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, SMALL, seed=0).eval()


def test_logprobs_match_a_direct_log_softmax(tokenizer, model):
    ids = encode(tokenizer, "Location 1: a mug 1. <action>go to shelf 2</action>")
    mask = [0] * 6 + [1] * (len(ids) - 6)
    seq = TokenSequence(tuple(ids), tuple(mask), tuple(-1 if m == 0 else 0 for m in mask))
    logp, ent = sequence_logprobs(model, [seq])
    with torch.no_grad():
        full = torch.log_softmax(
            model(input_ids=torch.tensor([ids])).logits[0].float(), -1
        )  # [L, V]
    for j in range(len(ids)):
        want_lp = full[j - 1, ids[j]] if mask[j] else torch.tensor(0.0)
        want_h = -(full[j - 1].exp() * full[j - 1]).sum() if mask[j] else torch.tensor(0.0)
        torch.testing.assert_close(logp[0, j], want_lp)
        torch.testing.assert_close(ent[0, j], want_h)
    assert logp.shape == ent.shape == (1, len(ids)) and logp.dtype == torch.float32
    assert (logp[0, 6:] < 0).all() and (ent[0, 6:] > 0).all()


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_logprobs_at_a_rollout_temperature_are_those_of_the_sampling_policy(tokenizer, model,
                                                                            temperature):
    ids = encode(tokenizer, "Location 1: a mug 1. <action>go to shelf 2</action>")
    mask = [0] * 6 + [1] * (len(ids) - 6)
    seq = TokenSequence(tuple(ids), tuple(mask), tuple(-1 if m == 0 else 0 for m in mask))
    logp, ent = sequence_logprobs(model, [seq], temperature=temperature)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # [L, V]
    scaled, plain = torch.log_softmax(logits / temperature, -1), torch.log_softmax(logits, -1)
    for j in range(6, len(ids)):
        torch.testing.assert_close(logp[0, j], scaled[j - 1, ids[j]])
        torch.testing.assert_close(ent[0, j], -(scaled[j - 1].exp() * scaled[j - 1]).sum())
    assert not torch.allclose(logp[0, 6:], plain[5:-1].gather(-1, torch.tensor(ids[6:])[:, None])[:, 0])
    greedy, _ = sequence_logprobs(model, [seq], temperature=0.0)  # greedy rollouts score at 1
    torch.testing.assert_close(greedy, sequence_logprobs(model, [seq])[0])


def test_batched_equals_looped(tokenizer, model):
    builder = SampleBuilder(tokenizer, FakeEnv(), "window", history_window=2)
    seqs = builder.build_batch([make_traj(tokenizer, n, seed=n) for n in (1, 4, 2)])
    lengths = {len(s) for s in seqs}
    assert len(lengths) > 1  # the batch needs padding
    batched, ent_b = sequence_logprobs(model, seqs, micro_batch=3)
    for n, seq in enumerate(seqs):
        alone, ent_a = sequence_logprobs(model, [seq], micro_batch=1)
        torch.testing.assert_close(batched[n, : len(seq)], alone[0])
        torch.testing.assert_close(ent_b[n, : len(seq)], ent_a[0])
        assert not batched[n, len(seq) :].any()


def test_micro_batches_by_count_and_by_token_budget():
    lengths = [5, 12, 3, 7, 7, 20]  # longest first: rows 5, 1, 3, 4, 0, 2
    assert MicroBatching(size=4).plan(lengths) == [[5, 1, 3, 4], [0, 2]]
    # 24 tokens: 20 alone (2 x 20 > 24), 12 + 7 (2 x 12), then 7 + 5 + 3 (3 x 7 = 21; a fourth row is none)
    assert MicroBatching(size=4, tokens=24).plan(lengths) == [[5], [1, 3], [4, 0, 2]]
    # 10 tokens: 20 and 12 over the budget, each alone; 7, 7 alone (2 x 7 > 10); 5 + 3 (2 x 5)
    assert MicroBatching(tokens=10).plan(lengths) == [[5], [1], [3], [4], [0, 2]]
    assert MicroBatching(tokens=1000).plan(lengths) == [[5, 1, 3, 4, 0, 2]]
    assert MicroBatching(tokens=24).plan([]) == []
    with pytest.raises(ValueError, match="size >= 1 and tokens >= 0, got 8, -1"):
        MicroBatching(tokens=-1).plan(lengths)


def test_token_budget_scores_as_the_count_does_and_counts_its_padding(tokenizer, model):
    builder = SampleBuilder(tokenizer, FakeEnv(), "window", history_window=2)
    seqs = builder.build_batch([make_traj(tokenizer, n, seed=n) for n in (1, 4, 2)])
    lengths = [len(s) for s in seqs]
    budget = 3 * max(lengths)  # the longest two share one with a shorter one
    plan = MicroBatching(tokens=budget).plan(lengths)
    assert len(plan) < len(seqs)  # some sequences share a micro-batch
    counts = PaddingCount(), PaddingCount()
    with counting(counts[0]):
        one, ent_one = sequence_logprobs(model, seqs, micro_batch=1)
    with counting(counts[1]):
        packed, ent_packed = sequence_logprobs(model, seqs, micro_batch=MicroBatching(tokens=budget))
    torch.testing.assert_close(packed, one)
    torch.testing.assert_close(ent_packed, ent_one)
    assert (counts[0].micro_batches, counts[0].tokens, counts[0].computed) == (len(seqs), sum(lengths), sum(lengths))
    computed = sum(len(p) * max(lengths[i] for i in p) for p in plan)
    assert (counts[1].micro_batches, counts[1].tokens, counts[1].computed) == (len(plan), sum(lengths), computed)
    assert counts[1].metrics() == {"perf/pad_share": pytest.approx(1 - sum(lengths) / computed),
                                   "perf/micro_batches": float(len(plan))}
    assert counts[0].metrics()["perf/pad_share"] == 0.0 < counts[1].metrics()["perf/pad_share"]


def test_head_chunking_and_sequences_without_actions(tokenizer, model):
    seqs = SampleBuilder(tokenizer, FakeEnv(), "full").build(make_traj(tokenizer, 3))
    empty = TokenSequence(seqs[0].input_ids[:20], (0,) * 20, (-1,) * 20)
    whole, ent = sequence_logprobs(model, seqs + [empty])
    chunked, ent_c = sequence_logprobs(model, seqs + [empty], head_chunk=2)
    torch.testing.assert_close(chunked, whole)
    torch.testing.assert_close(ent_c, ent)
    assert not whole[1].any() and not sequence_logprobs(model, [empty])[0].any()


def test_full_single_pass_equals_scoring_each_turn_prefix(tokenizer, model):
    """One forward pass over the full chat gives every turn the log-probs it gets when its
    own rollout prompt + response is scored alone (causality; the full-context equivalence)."""
    traj = make_traj(tokenizer, 4)
    builder = SampleBuilder(tokenizer, FakeEnv(), "full")
    full, _ = score_trajectories(model, builder, [traj])
    per_turn = []
    for t in range(4):
        prompt, _ = builder.rollout_input(
            traj.task, traj.turns[:t], traj.response_ids[:t], traj.turns[t].observation
        )
        r = traj.response_ids[t]
        seq = TokenSequence(
            tuple(prompt) + r,
            (0,) * len(prompt) + (1,) * len(r),
            (-1,) * len(prompt) + (t,) * len(r),
        )
        per_turn.append(sequence_logprobs(model, [seq])[0][0, len(prompt) :])
    torch.testing.assert_close(full.logp[0], torch.cat(per_turn))


def test_window_and_full_share_layout_and_agree_on_turn_zero(tokenizer, model):
    trajs = [make_traj(tokenizer, 3, seed=1), make_traj(tokenizer, 1, seed=2)]
    window, _ = score_trajectories(
        model, SampleBuilder(tokenizer, FakeEnv(), "window", history_window=3), trajs, [SKILL, None]
    )
    full, _ = score_trajectories(
        model, SampleBuilder(tokenizer, FakeEnv(), "full"), trajs, [SKILL, None]
    )
    for field in ("token_ids", "mask", "turn_ids"):
        assert torch.equal(getattr(window, field), getattr(full, field))
    n_tokens = [sum(len(r) for r in tr.response_ids) for tr in trajs]
    assert window.logp.shape == (2, max(n_tokens)) and window.mask.sum(1).tolist() == n_tokens
    assert (
        window.turn_ids[1, n_tokens[1] :].eq(-1).all() and not window.logp[1, n_tokens[1] :].any()
    )
    turn0 = window.turn_ids == 0
    torch.testing.assert_close(window.logp[turn0], full.logp[turn0])  # same context at turn 0
    later = window.turn_ids[0] > 0
    assert not torch.allclose(window.logp[0, later], full.logp[0, later])  # different contexts


def test_collated_token_ids_are_the_sampled_ids_in_turn_order(tokenizer, model):
    trajs = [make_traj(tokenizer, 3, seed=5)]
    batch, seqs = score_trajectories(model, SampleBuilder(tokenizer, FakeEnv(), "window"), trajs)
    flat = [i for r in trajs[0].response_ids for i in r]
    assert batch.token_ids[0].tolist() == flat
    # the same sequences listed in reverse still collate in turn order
    logp, ent = sequence_logprobs(model, seqs[::-1])
    again = collate_actions(seqs[::-1], logp, ent, 1)
    assert again.token_ids[0].tolist() == flat
    torch.testing.assert_close(again.logp, batch.logp)


def test_skill_changes_teacher_logprobs_of_the_same_tokens(tokenizer, model):
    trajs = [make_traj(tokenizer, 2)]
    builder = SampleBuilder(tokenizer, FakeEnv(), "full")
    student, _ = score_trajectories(model, builder, trajs)
    teacher, _ = score_trajectories(model, builder, trajs, [SKILL])
    assert torch.equal(student.token_ids, teacher.token_ids)
    assert not torch.allclose(student.logp, teacher.logp)


def test_gradients_flow_only_with_grad(tokenizer):
    model = build_tiny_model(tokenizer, SMALL, seed=0)
    builder = SampleBuilder(tokenizer, FakeEnv(), "full")
    frozen, _ = score_trajectories(model, builder, [make_traj(tokenizer, 2)])
    assert frozen.logp.grad_fn is None
    live, _ = score_trajectories(
        model, builder, [make_traj(tokenizer, 2)], grad=True, with_entropy=False
    )
    assert live.entropy is None
    (-(live.logp * live.mask).sum()).backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_scoring_rejects_bad_inputs(tokenizer, model):
    bad = TokenSequence((1, 2, 3), (1, 1, 0), (0, 0, -1))
    with pytest.raises(ValueError, match="first token"):
        sequence_logprobs(model, [bad])
    with pytest.raises(ValueError, match="micro_batch and head_chunk must be >= 1, got 0, 1024"):
        sequence_logprobs(model, [bad], micro_batch=0)
    ok = TokenSequence((1, 2, 3), (0, 1, 1), (-1, 0, 0), traj=2)
    with pytest.raises(ValueError, match=r"traj=2, outside \[0, 1\)"):
        collate_actions([ok], torch.zeros(1, 3), None, 1)


@pytest.mark.parametrize("context", ["window", "full"])
def test_topk_support_round_trips_between_teacher_and_student(tokenizer, model, context):
    """A teacher pass returns the k most likely ids per action token with their log-probs
    (as a direct log_softmax gives them); a student pass on that support returns the
    student's log-probs of exactly those ids, through any sequence layout."""
    builder = SampleBuilder(tokenizer, FakeEnv(), context, history_window=1)
    trajs = [make_traj(tokenizer, n, seed=n) for n in (3, 1, 2)]
    teacher, seqs = score_trajectories(model, builder, trajs, [SKILL] * 3, top_k=5)
    assert teacher.topk_ids.shape == (*teacher.mask.shape, 5)
    mask = teacher.mask.bool()
    # the sampled token's log-prob is at most the top-1 and the top-k are sorted
    assert (teacher.topk_logp[..., 0][mask] >= teacher.logp[mask] - 1e-6).all()
    assert (teacher.topk_logp[..., :-1] >= teacher.topk_logp[..., 1:])[mask].all()
    support = teacher.topk_ids.clone()
    support[..., 0] = teacher.token_ids  # the sampled token first: its log-prob is known
    student, _ = score_trajectories(model, builder, trajs, None, support=support, grad=True)
    assert student.topk_ids is None and student.topk_logp.requires_grad
    torch.testing.assert_close(student.topk_logp[..., 0][mask].detach(), student.logp[mask].detach())
    assert not student.topk_logp[~mask].any()
    if context == "full":  # one sequence per trajectory: compare with a direct log_softmax
        seq = builder.build(trajs[0])[0]
        with torch.no_grad():
            full = torch.log_softmax(model(input_ids=torch.tensor([seq.input_ids])).logits[0].float(), -1)
        positions = [j for j, m in enumerate(seq.action_mask) if m]
        for col, j in enumerate(positions):
            torch.testing.assert_close(student.topk_logp[0, col].detach(), full[j - 1, support[0, col]])
