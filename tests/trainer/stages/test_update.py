"""The update's gradient accumulation (trainer/rl.py): a PPO minibatch run as micro-batches
of one sequence, or packed by a token budget, gives the gradients of one backward over the
whole minibatch, for GRPO, SEED and ETRO (and OPSD's top-k distribution matching), under every
``algo.loss_agg`` mode, with one or two PPO minibatches, in both context modes (a
window-context trajectory is split across micro-batches)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import trainer.stages.rl as rl
from support.paths import DATA
from trainer.algos import LOSS_AGGS, get_method
from trainer.episodes.scoring import MicroBatching
from trainer.run.resolve import load_config, resolve

MICRO = DATA / "train_micro.yaml"


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    """One micro context per context mode (oracle writer, so that skills exist)."""
    from trainer.run.components import build_components

    built = {}
    for mode in ("full", "window"):
        out = tmp_path_factory.mktemp(mode)
        cfg = resolve(load_config(MICRO, ["algo.method=seed", "writer.kind=oracle", f"env.context={mode}",
                                          "rollout.tasks_per_step=2", "rollout.group_size=3",
                                          f"output.dir={out}"]))
        built[mode] = build_components(cfg)
    return built


def with_method(base, method: str, **algo):
    from trainer.hindsight.writers import PrivilegedContext
    from trainer.run.components import start_rl

    cfg = resolve(load_config(MICRO, [f"algo.method={method}", "writer.kind=oracle",
                                      f"env.context={base.cfg.env.context}", "rollout.tasks_per_step=2",
                                      "rollout.group_size=3", f"output.dir={base.cfg.output.dir}"]))
    ctx = copy.copy(base)
    ctx.cfg = dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, **algo))
    ctx.spec = get_method(method)
    ctx.privileged = PrivilegedContext(ctx.make_env) if "privileged" in ctx.spec.skills else None
    start_rl(ctx)
    return ctx


def gradients_of_update(ctx, batch, micro_batch_size: int, micro_batch_tokens: int = 0,
                        timer: rl.PhaseTimer | None = None) -> list[list[torch.Tensor]]:
    """The gradient at each optimizer step of one update, the model restored after it
    (``timer``: the update's, counting its micro-batches)."""
    state = copy.deepcopy(ctx.model.state_dict())
    ctx.cfg = dataclasses.replace(ctx.cfg, algo=dataclasses.replace(
        ctx.cfg.algo, micro_batch_size=micro_batch_size, micro_batch_tokens=micro_batch_tokens))
    ctx.optimizer = torch.optim.AdamW(ctx.model.parameters(), lr=1e-3)
    grads, real_step = [], ctx.optimizer.step

    def step(*args, **kwargs):
        grads.append([p.grad.detach().clone() for p in ctx.model.parameters() if p.grad is not None])
        return real_step(*args, **kwargs)

    ctx.optimizer.step = step
    _, finite = rl.update(ctx, batch, 1, timer or rl.PhaseTimer())
    ctx.model.load_state_dict(state)
    assert finite
    return grads


def with_advantages(batch):
    """The batch with advantages of both signs on every token: the untrained micro policy's
    episodes all fail alike, so GRPO's own would tie at 0 and the RL term would move nothing."""
    noise = torch.randn(batch.advantages.shape, generator=torch.Generator().manual_seed(0))
    batch.advantages = noise * batch.old.mask
    return batch


CASES = [(m, agg) for m in ("grpo", "seed", "etro") for agg in LOSS_AGGS] + [("grpo_opsd", "token-mean")]
SHAPES = [(mode, minibatches) for mode in ("full", "window") for minibatches in (1, 2)]


def accumulation_cases():
    """Every (method, loss_agg) case with every (context mode, minibatches) shape.  The default
    suite runs a covering subset: each case once, the shapes taken in turn, so every method
    meets both context modes and both minibatch counts (10 of the 40; each takes seconds); the
    rest are ``slow``."""
    for i, case in enumerate(CASES):
        for j, shape in enumerate(SHAPES):
            marks = () if j == i % len(SHAPES) else (pytest.mark.slow,)
            yield pytest.param(*shape, *case, marks=marks, id="-".join(map(str, (*case, shape[1], shape[0]))))


def test_the_default_cases_cover_every_method_in_both_modes_and_minibatch_counts():
    default = [p.values for p in accumulation_cases() if not p.marks]
    assert len(default) == len(CASES)
    assert {(v[2], v[3]) for v in default} == set(CASES)
    for method in {m for m, _ in CASES} - {"grpo_opsd"}:
        assert {v[0] for v in default if v[2] == method} == {"full", "window"}, method
        assert {v[1] for v in default if v[2] == method} == {1, 2}, method


@pytest.mark.parametrize(("mode", "minibatches", "method", "agg"), list(accumulation_cases()))
def test_micro_batches_accumulate_to_the_minibatch_gradient(contexts, mode, minibatches, method, agg):
    ctx = with_method(contexts[mode], method, loss_agg=agg, minibatch_size=6 // minibatches, kl_coef=0.01)
    batch = with_advantages(rl.collect_batch(ctx, 1, rl.PhaseTimer()))
    lengths = [len(s) for s in ctx.builder.build_batch(batch.trajectories)]
    assert len(lengths) >= 6 and (mode == "full" or len(lengths) > len(batch.trajectories))
    budget = 3 * sorted(lengths)[len(lengths) // 2]  # three sequences of the median length
    packed = MicroBatching(tokens=budget).plan(lengths)
    assert 1 < len(packed) < len(lengths) and any(len(p) > 2 for p in packed), (lengths, packed)  # no extreme
    whole = gradients_of_update(ctx, batch, micro_batch_size=10_000)  # one backward a minibatch
    timers = rl.PhaseTimer(), rl.PhaseTimer()  # they count the update's forwards
    split = gradients_of_update(ctx, batch, micro_batch_size=1, timer=timers[0])  # one sequence at a time
    by_tokens = gradients_of_update(ctx, batch, micro_batch_size=1, micro_batch_tokens=budget, timer=timers[1])
    assert timers[1].padding.micro_batches < timers[0].padding.micro_batches  # the budget packed them
    assert len(whole) == len(split) == len(by_tokens) == minibatches
    for step_whole, step_split, step_tokens in zip(whole, split, by_tokens):
        assert len(step_whole) == len(step_split) == len(step_tokens) > 0
        assert max(float(g.abs().max()) for g in step_whole) > 1e-4  # not a vacuous zero gradient
        for a, b, c in zip(step_whole, step_split, step_tokens):
            torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(c, a, atol=1e-6, rtol=1e-5)


def test_loss_metrics_of_micro_batches_add_up(contexts):
    """``loss/*`` of a micro-batched minibatch equal the unsplit ones; token means agree."""
    ctx = with_method(contexts["window"], "seed", loss_agg="seq-mean-token-mean")
    batch = with_advantages(rl.collect_batch(ctx, 1, rl.PhaseTimer()))
    state = copy.deepcopy(ctx.model.state_dict())
    out = {}
    for size in (10_000, 1):
        ctx.cfg = dataclasses.replace(ctx.cfg, algo=dataclasses.replace(ctx.cfg.algo, micro_batch_size=size))
        ctx.optimizer = torch.optim.AdamW(ctx.model.parameters(), lr=1e-3)
        out[size], _ = rl.update(ctx, batch, 1, rl.PhaseTimer())
        ctx.model.load_state_dict(state)
    for key in ("loss/total", "loss/rl", "loss/opd", "ppo/pg_loss", "ppo/clip_frac", "ppo/ratio_max",
                "opd/gate_mean", "opd/token_frac"):
        assert out[1][key] == pytest.approx(out[10_000][key], rel=1e-5, abs=1e-7), key


def test_sft_micro_batches_accumulate_to_the_batch_step(monkeypatch):
    """The SFT stages (warm start, Stage 1) accumulate too: one example at a time, or
    examples packed by a token budget, give the gradient of one backward over the batch."""
    from trainer.episodes.samples import TokenSequence
    from trainer.models.backbones import load_pretrained
    from trainer.stages.sft import sft
    from trainer.stages.warm_start import bundle_path

    examples = [TokenSequence(tuple(range(5, 5 + n)), (0,) * 3 + (1,) * (n - 3), (-1,) * 3 + (0,) * (n - 3))
                for n in (9, 14, 6, 11)]
    grads, real_clip = [], torch.nn.utils.clip_grad_norm_

    def clip(parameters, *args, **kwargs):  # sft clips right before its optimizer step
        parameters = list(parameters)
        grads.append([p.grad.detach().clone() for p in parameters])
        return real_clip(parameters, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    losses = []
    assert MicroBatching(tokens=20).plan([9, 14, 6, 11]) == [[1], [3], [0, 2]]
    for micro in (None, 1, MicroBatching(tokens=20)):
        model, _ = load_pretrained(str(bundle_path("ezpoints")), torch.float32, "cpu")
        metrics = sft(model, examples, epochs=1, lr=1e-3, batch_size=4, seed=0, micro_batch=micro)
        losses.append(metrics["sft/loss_first"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-6) == losses[2]
    assert len(grads) == 3
    for a, b, c in zip(*grads):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(c, a, atol=1e-6, rtol=1e-5)


def test_the_current_teacher_scores_only_rows_with_a_skill(contexts, monkeypatch):
    """SEED's current-policy teacher skips the sequences without OPD tokens (no valid skill):
    the update's gradients and recorded Delta equal those of scoring every row."""
    ctx = with_method(contexts["full"], "seed")
    batch = with_advantages(rl.collect_batch(ctx, 1, rl.PhaseTimer()))
    primary = ctx.spec.skills[0]
    without = [0, 3, 4]  # these trajectories' writer output "did not parse"
    batch.texts[primary] = [None if i in without else t for i, t in enumerate(batch.texts[primary])]
    batch.opd_rows[primary][without] = False
    assert batch.opd_rows[primary].any()
    scored, real = [], rl.sequence_logprobs

    def spy(model, seqs, *args, grad=False, **kwargs):
        if not grad:
            scored.append(len(seqs))
        return real(model, seqs, *args, grad=grad, **kwargs)

    monkeypatch.setattr(rl, "sequence_logprobs", spy)
    runs = {}
    for name in ("skill rows", "every row"):
        if name == "every row":
            monkeypatch.setattr(rl, "teacher_rows", lambda mask, top_k=0: list(range(mask.shape[0])))
        scored.clear()
        batch.deltas = {}
        runs[name] = (gradients_of_update(ctx, batch, micro_batch_size=2), sum(scored),
                      batch.deltas[primary].clone())
    (few, n_few, delta_few), (every, n_every, delta_every) = runs["skill rows"], runs["every row"]
    epochs, trajs = ctx.cfg.algo.ppo_epochs, batch.trajectories
    with_skill = [t for i, t in enumerate(trajs) if i not in without]
    assert (n_few, n_every) == (epochs * len(ctx.builder.build_batch(with_skill)),
                                epochs * len(ctx.builder.build_batch(trajs)))
    torch.testing.assert_close(delta_few, delta_every, atol=1e-6, rtol=1e-5)
    assert float(delta_few[without].abs().max()) == 0.0
    assert len(few) == len(every) > 0
    for step_few, step_every in zip(few, every):
        for a, b in zip(step_few, step_every):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_gradient_parts_take_the_same_step_and_split_it_by_term(contexts):
    """tracking.gradient_parts back-propagates the RL and OPD terms apart: the optimizer
    steps on the same summed gradient as one backward, and the logged norms are those of each
    term's own gradient (lambda_opd included), their ratio, cosine and sign flips."""
    ctx = with_method(contexts["full"], "seed", kl_coef=0.01, lambda_opd=0.5)
    batch = with_advantages(rl.collect_batch(ctx, 1, rl.PhaseTimer()))
    plain = gradients_of_update(ctx, batch, micro_batch_size=2)
    ctx.cfg = dataclasses.replace(ctx.cfg, tracking=dataclasses.replace(ctx.cfg.tracking, gradient_parts=True))
    split = gradients_of_update(ctx, batch, micro_batch_size=2)
    assert len(split) == len(plain)
    for a, b in zip(split, plain):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-7)
    # each term alone: zero the other one's coefficient
    rl_only = gradients_of_update(with_method(contexts["full"], "seed", kl_coef=0.01, lambda_opd=0.0),
                                  batch, micro_batch_size=2)[0]
    opd = [t - r for t, r in zip(plain[0], rl_only)]
    state = copy.deepcopy(ctx.model.state_dict())
    ctx.optimizer = torch.optim.AdamW(ctx.model.parameters(), lr=1e-3)
    metrics, finite = rl.update(ctx, batch, 1, rl.PhaseTimer())
    ctx.model.load_state_dict(state)
    assert finite
    norm = lambda grads: float(torch.cat([g.flatten() for g in grads]).double().norm())
    assert metrics["update/grad_norm_rl"] == pytest.approx(norm(rl_only), rel=1e-3)
    assert metrics["update/grad_norm_opd"] == pytest.approx(norm(opd), rel=1e-3)
    assert metrics["update/grad_ratio_opd_rl"] == pytest.approx(norm(opd) / norm(rl_only), rel=1e-3)
    flat_rl, flat_sum = (torch.cat([g.flatten() for g in gs]) for gs in (rl_only, plain[0]))
    moved = flat_sum != 0
    flipped = float(((torch.sign(flat_sum) != torch.sign(flat_rl)) & moved).sum() / moved.sum())
    assert metrics["update/grad_sign_flip_opd"] == pytest.approx(flipped, abs=1e-3)
    assert -1.0 <= metrics["update/grad_cos_opd_rl"] <= 1.0
