"""Stage-1 writer replay in the RL update (``stages.skill_sft.replay``): what it adds to the
gradients, how it draws, and that it is off unless asked for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from support.tiny import CORPUS, SMALL
from trainer.config import RunConfig, apply_overrides
from trainer.models.backbones import build_tiny_model, train_tokenizer
from trainer.stages.sft import example
from trainer.stages.skill_sft import replay_backward


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, 400)


def context(tokenizer, replay: float, examples, batch: int = 3):
    cfg = apply_overrides(RunConfig(), {"stages.skill_sft.replay": replay, "stages.skill_sft.replay_batch": batch,
                                        "algo.micro_batch_size": 2, "seed": 5})
    model = build_tiny_model(tokenizer, SMALL, seed=0)
    return SimpleNamespace(cfg=cfg, model=model, replay=examples, builder=SimpleNamespace(vision=None))


def examples(tokenizer, n: int = 6):
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    return [example(ids(CORPUS[i]), ids(CORPUS[i + 1])) for i in range(n)]


def nll(model, batch) -> torch.Tensor:
    """Token-mean NLL of the targets, written out directly."""
    total, count = 0.0, 0
    for s in batch:
        ids = torch.tensor([s.input_ids])
        logp = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
        picked = logp.gather(1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(s.action_mask[1:], dtype=torch.float32)
        total, count = total + (picked * mask).sum(), count + mask.sum()
    return -total / count


def test_replay_adds_its_weight_times_the_stage1_nll_gradient(tokenizer):
    """The gradient replay leaves is ``replay`` times that of the drawn examples' token-mean
    NLL (micro-batched as any update), and the NLL it reports is theirs."""
    pool = examples(tokenizer)
    ctx = context(tokenizer, 0.5, pool)
    metrics = replay_backward(ctx, "1:0:0")
    got = {n: p.grad.clone() for n, p in ctx.model.named_parameters() if p.grad is not None}
    assert got, "replay left no gradient"

    # the same draw, by hand: the function draws replay_batch of the pool with its own rng
    import random
    rng = random.Random("replay:5:1:0:0:0")
    drawn = [pool[i] for i in rng.sample(range(len(pool)), 3)]
    ctx.model.zero_grad(set_to_none=True)
    loss = nll(ctx.model, drawn)
    (0.5 * loss).backward()
    assert metrics["loss/replay"] == pytest.approx(loss.item(), rel=1e-5)
    for name, p in ctx.model.named_parameters():
        assert torch.allclose(got[name], p.grad, atol=1e-6, rtol=1e-4), name


def test_each_minibatch_draws_its_own_examples_the_same_on_a_rerun(tokenizer):
    pool = examples(tokenizer)
    first, again, other = (replay_backward(context(tokenizer, 1.0, pool, batch=2), key)["loss/replay"]
                           for key in ("1:0:0", "1:0:0", "2:0:0"))
    assert first == again
    assert first != other


def test_replay_is_off_by_default_and_without_examples(tokenizer):
    """SEED as published replays nothing: weight 0 (the default) or no Stage-1 example kept
    leaves the gradients untouched and logs no replay loss."""
    assert RunConfig().stages.skill_sft.replay == 0.0
    for ctx in (context(tokenizer, 0.0, examples(tokenizer)), context(tokenizer, 1.0, [])):
        assert replay_backward(ctx, "1:0:0") == {}
        assert all(p.grad is None for p in ctx.model.parameters())
