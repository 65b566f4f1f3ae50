"""SEED's gated OPD loss (review Eq. 1) and the ungated OPSD loss: values and exact gradients."""

from __future__ import annotations

import pytest
import torch

from trainer.algos import opsd_loss, opsd_topk_loss, seed_gate, seed_opd_loss

F64 = torch.float64


def test_gate_matches_review_three_step_table():
    # SEED review worked trace: student / teacher log-probs of trajectory 2's three actions
    student = torch.tensor([-0.350, -0.900, -1.100], dtype=F64)
    teacher = torch.tensor([-0.330, -1.400, -2.600], dtype=F64)
    gate = seed_gate(teacher - student, beta=5.0)
    assert [round(g, 4) for g in gate.tolist()] == [0.5250, 0.0759, 0.0006]


def test_gate_matches_review_staleness_example():
    assert round(seed_gate(torch.tensor(0.8), 5.0).item(), 4) == 0.9820
    assert round(seed_gate(torch.tensor(0.3), 5.0).item(), 4) == 0.8176


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    student = (-torch.rand(3, 6, generator=gen, dtype=F64) * 2).requires_grad_()
    teacher = -torch.rand(3, 6, generator=gen, dtype=F64) * 2
    mask = torch.rand(3, 6, generator=gen) > 0.3
    mask[0, 0] = True
    return student, teacher, mask


def test_seed_loss_value_and_metrics_by_hand():
    student = torch.tensor([[-0.350, -0.900, -1.100, -5.0]], dtype=F64, requires_grad=True)
    teacher = torch.tensor([[-0.330, -1.400, -2.600, float("nan")]], dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, metrics = seed_opd_loss(student, teacher, mask, beta=5.0)
    g = torch.sigmoid(5 * torch.tensor([0.02, -0.5, -1.5], dtype=F64))
    delta = torch.tensor([0.02, -0.5, -1.5], dtype=F64)
    assert loss.item() == pytest.approx((g * delta).mean().item())
    assert metrics["gate_mean"] == pytest.approx(g.mean().item())
    assert metrics["gate_std"] == pytest.approx(g.std(unbiased=False).item())
    assert metrics["delta_mean"] == pytest.approx(-1.98 / 3)
    (grad,) = torch.autograd.grad(loss, student)
    assert torch.isfinite(grad).all()  # NaN teacher off the mask never reaches backward
    assert grad[0, 3] == 0


def test_seed_gradient_is_minus_gate_times_grad_logp_over_n():
    student, teacher, mask = _batch()
    teacher = teacher.requires_grad_()
    loss, _ = seed_opd_loss(student, teacher, mask, beta=5.0)
    loss.backward()
    gate = torch.sigmoid(5.0 * (teacher - student).detach())
    expected = -gate * mask / mask.sum()
    assert torch.allclose(student.grad, expected)
    assert teacher.grad is None or torch.count_nonzero(teacher.grad) == 0  # teacher detached


def test_seed_gradient_through_a_network_matches_chain_rule():
    # logp_student = f(theta): the OPD gradient is -sum g * d logp / d theta / n
    gen = torch.Generator().manual_seed(1)
    theta = torch.randn(4, dtype=F64, generator=gen, requires_grad=True)
    feats = torch.randn(2, 3, 4, dtype=F64, generator=gen)
    student = torch.nn.functional.logsigmoid(feats @ theta)  # [2, 3]
    teacher = torch.randn(2, 3, dtype=F64, generator=gen) - 1
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, _ = seed_opd_loss(student, teacher, mask, beta=5.0)
    (grad,) = torch.autograd.grad(loss, theta, retain_graph=True)
    gate = torch.sigmoid(5.0 * (teacher - student.detach()))
    weights = -(gate * mask / mask.sum()).flatten()
    jac = torch.stack(
        [torch.autograd.grad(s, theta, retain_graph=True)[0] for s in student.flatten()]
    )
    assert torch.allclose(grad, weights @ jac)


def test_opsd_gradient_is_minus_delta_and_value_is_reverse_kl_estimate():
    student, teacher, mask = _batch(seed=3)
    loss, metrics = opsd_loss(student, teacher, mask)
    delta = (teacher - student).detach()
    n = mask.sum()
    assert loss.item() == pytest.approx((-(delta * mask).sum() / n).item())
    assert metrics["reverse_kl"] == pytest.approx(loss.item())
    (grad,) = torch.autograd.grad(loss, student)
    assert torch.allclose(grad, -delta * mask / n)


def test_opsd_and_seed_differ_in_sign_of_push():
    # a token the teacher disfavours (Delta < 0): SEED still pushes it up a little, OPSD down
    student = torch.tensor([[-0.5]], dtype=F64, requires_grad=True)
    teacher = torch.tensor([[-2.0]], dtype=F64)
    mask = torch.ones(1, 1)
    (g_seed,) = torch.autograd.grad(seed_opd_loss(student, teacher, mask, 5.0)[0], student)
    (g_opsd,) = torch.autograd.grad(opsd_loss(student, teacher, mask)[0], student)
    assert g_seed.item() < 0 < g_opsd.item()  # descent raises logp for SEED, lowers it for OPSD


def test_opd_mask_excludes_rows_but_keeps_them_in_the_denominator():
    """A trajectory without valid hindsight gets no OPD gradient; the token-mean still
    divides by every valid token (ETRO B.2 convention)."""
    import torch

    from trainer.algos import LossInputs, get_method, policy_loss
    from trainer.config import AlgoConfig

    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]], requires_grad=True)
    teacher = torch.tensor([[-0.5, -1.0], [-0.1, -0.2]])
    mask = torch.ones(2, 2)
    opd_mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    cfg = AlgoConfig(method="seed", lambda_opd=1.0, kl_coef=0.0)
    inputs = LossInputs(logp=logp, logp_old=logp.detach(), advantages=torch.zeros(2, 2), mask=mask,
                        logp_teacher=teacher, opd_mask=opd_mask)
    loss, metrics = policy_loss(get_method("seed"), inputs, cfg)
    loss.backward()
    gate = torch.sigmoid(5.0 * (teacher - logp.detach()))
    expected = torch.zeros(2, 2)
    expected[0] = -gate[0] / 4  # n = 4 valid tokens in the denominator
    # the RL term has zero advantages, so the gradient is the OPD term's alone
    assert torch.allclose(logp.grad, expected, atol=1e-6)
    assert metrics["opd/token_frac"] == 0.5


@pytest.mark.parametrize("method", ["seed", "grpo_opsd"])
def test_opd_loss_follows_loss_agg_with_non_opd_tokens_in_the_denominator(method):
    """The OPD term is aggregated by algo.loss_agg like the policy loss, not always by
    token-mean (OPSD here on its sampled-token path, opsd_top_k = 0)."""
    from trainer.algos import LossInputs, get_method, policy_loss
    from trainer.config import AlgoConfig

    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.25, 0.5, 0.5]], dtype=F64)).requires_grad_()
    teacher = torch.log(torch.tensor([[0.8, 0.8, 0.8], [0.5, 0.5, 0.5]], dtype=F64))
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    opd_mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    inputs = LossInputs(logp=logp, logp_old=logp.detach(), advantages=torch.zeros(2, 3, dtype=F64),
                        mask=mask, logp_teacher=teacher, opd_mask=opd_mask)
    spec = get_method(method)
    got = {}
    for agg in ("token-mean", "seq-mean-token-mean"):
        _, metrics = policy_loss(spec, inputs, AlgoConfig(method=method, loss_agg=agg, kl_coef=0.0,
                                                          opsd_top_k=0))
        got[agg] = metrics["loss/opd"]
    # per-token OPD values on opd tokens, 0 on the others
    delta = (teacher - logp).detach()
    per = torch.sigmoid(5.0 * delta) * delta if method == "seed" else -delta
    per = torch.where(opd_mask, per, torch.zeros_like(per))
    assert got["token-mean"] == pytest.approx(per[mask].sum().item() / 4)
    assert got["seq-mean-token-mean"] == pytest.approx((per[0].sum().item() / 3 + per[1, 0].item()) / 2)


def test_opsd_topk_loss_is_the_exact_reverse_kl_on_the_teacher_support():
    """Renormalised over the teacher's k ids, the loss is sum q_S (log q_S - log q_T); with
    the whole vocabulary as support it is the full reverse KL, and the teacher gets no
    gradient."""
    g = torch.Generator().manual_seed(0)
    student_logits = torch.randn(2, 3, 6, generator=g, dtype=F64, requires_grad=True)
    teacher_logits = torch.randn(2, 3, 6, generator=g, dtype=F64, requires_grad=True)
    ls, lt = torch.log_softmax(student_logits, -1), torch.log_softmax(teacher_logits, -1)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    loss, metrics = opsd_topk_loss(ls, lt, mask)
    full = (ls.exp() * (ls - lt)).sum(-1)  # the reverse KL over all 6 tokens
    assert loss.item() == pytest.approx(full[mask].mean().item())
    assert metrics["topk_mass"] == pytest.approx(1.0) and metrics["reverse_kl"] > 0
    loss.backward()
    assert teacher_logits.grad is None or not teacher_logits.grad.any()
    assert student_logits.grad[0, 0].abs().sum() > 0 and not student_logits.grad[1, 2].any()
    # a top-2 support renormalises both distributions over those 2 ids
    top, ids = lt.detach().topk(2, dim=-1)
    part, m2 = opsd_topk_loss(ls.detach().gather(-1, ids), top, mask)
    qs = torch.log_softmax(ls.detach().gather(-1, ids), -1)
    qt = torch.log_softmax(top, -1)
    assert part.item() == pytest.approx((qs.exp() * (qs - qt)).sum(-1)[mask].mean().item())
    assert m2["topk_mass"] == pytest.approx(top.exp().sum(-1)[mask].mean().item())
    same, _ = opsd_topk_loss(top, top, mask)
    assert same.item() == pytest.approx(0.0, abs=1e-12)


def test_opsd_with_topk_needs_the_topk_inputs():
    from trainer.algos import LossInputs, get_method, policy_loss
    from trainer.config import AlgoConfig

    logp = torch.zeros(1, 2, requires_grad=True)
    inputs = LossInputs(logp=logp, logp_old=logp.detach(), advantages=torch.zeros(1, 2),
                        mask=torch.ones(1, 2), logp_teacher=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="opsd_top_k > 0 needs LossInputs.topk_logp"):
        policy_loss(get_method("opsd"), inputs, AlgoConfig(method="opsd", kl_coef=0.0))
    with pytest.raises(ValueError, match=r"topk_logp has shape \(1, 3, 4\); expected \[1, 2, k\]"):
        LossInputs(logp=logp, logp_old=logp.detach(), advantages=torch.zeros(1, 2),
                   mask=torch.ones(1, 2), topk_logp=torch.zeros(1, 3, 4),
                   topk_logp_teacher=torch.zeros(1, 3, 4))
