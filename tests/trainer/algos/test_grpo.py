"""GRPO advantages, the clipped PPO loss and loss aggregation, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algos import aggregate, grpo_advantages, ppo_clip_loss, tied_groups

F64 = torch.float64


def test_grpo_unbiased_population_and_none_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 2.0], dtype=F64)
    groups = torch.tensor([7, 7, 7, 7, 3, 3, 3, 9])
    # group 7: mean 0.5, deviations +-0.5; unbiased std sqrt(1/3), population std 0.5
    unbiased = grpo_advantages(rewards, groups, eps=0.0)
    s = 0.5 / math.sqrt(1 / 3)
    assert torch.allclose(unbiased, torch.tensor([s, -s, -s, s, 0, 0, 0, 0], dtype=F64))
    population = grpo_advantages(rewards, groups, eps=0.0, std_mode="population")
    assert torch.allclose(population, torch.tensor([1.0, -1, -1, 1, 0, 0, 0, 0], dtype=F64))
    dr_grpo = grpo_advantages(rewards, groups, std_mode="none")
    assert torch.allclose(dr_grpo, torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0], dtype=F64))


def test_review_two_trajectory_example_uses_eps():
    # SEED review worked trace: R = [1, 0], mu = 0.5, sigma = 0.5 -> A = [+1, -1] up to eps
    adv = grpo_advantages(
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), eps=1e-6, std_mode="population"
    )
    assert adv.tolist() == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)], rel=1e-6)


@pytest.mark.parametrize("std_mode", ["unbiased", "population", "none"])
def test_tied_groups_are_exactly_zero(std_mode):
    # 0.1 * 3 / 3 != 0.1 in floating point: ties must still give an exact 0
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 1.0, 0.7])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    adv = grpo_advantages(rewards, groups, std_mode=std_mode)
    assert torch.equal(adv, torch.zeros(6))
    assert tied_groups(rewards, groups).tolist() == [True, True, True]


def test_batched_equals_looped_over_groups():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=gen, dtype=F64)
    groups = torch.tensor([5, 1, 5, 1, 9, 9, 1, 5, 9, 9, 1, 5])
    batched = grpo_advantages(rewards, groups)
    for g in groups.unique():
        sel = groups == g
        assert torch.allclose(batched[sel], grpo_advantages(rewards[sel], groups[sel]))


def test_grpo_rejects_unknown_std_mode_and_empty_batch():
    with pytest.raises(ValueError, match="unknown std_mode 'std'.*unbiased, population, none"):
        grpo_advantages(torch.ones(2), torch.zeros(2), std_mode="std")
    with pytest.raises(ValueError, match="empty batch"):
        grpo_advantages(torch.ones(0), torch.zeros(0, dtype=torch.long))


def _ppo_case():
    ratios = torch.tensor([[1.5, 0.5, 1.1, 1.0]], dtype=F64)
    logp = ratios.log().requires_grad_()
    adv = torch.tensor([[1.0, -1.0, -1.0, 2.0]], dtype=F64)
    return logp, torch.zeros_like(ratios), adv, torch.ones_like(ratios, dtype=torch.bool)


def test_ppo_clip_loss_by_hand():
    logp, logp_old, adv, mask = _ppo_case()
    loss, metrics = ppo_clip_loss(logp, logp_old, adv, mask, clip_eps=0.2)
    # per token: max(-1.5, -1.2) = -1.2 | max(0.5, 0.8) = 0.8 | 1.1 | -2
    assert loss.item() == pytest.approx((-1.2 + 0.8 + 1.1 - 2.0) / 4)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 1.0) / 4)
    assert metrics["ratio_max"] == pytest.approx(1.5)
    assert metrics["kl"] == 0.0
    (grad,) = torch.autograd.grad(loss, logp)
    # clipped tokens get no gradient; otherwise d/dlogp(-rho*A)/n = -rho*A/n
    assert grad.tolist()[0] == pytest.approx([0.0, 0.0, 1.1 / 4, -2.0 / 4])


def test_ppo_k3_kl_to_reference():
    logp = torch.zeros(1, 2, dtype=F64, requires_grad=True)
    ref = torch.full((1, 2), math.log(0.5), dtype=F64)
    k3 = 0.5 + math.log(2) - 1  # exp(ref - logp) - (ref - logp) - 1
    loss, metrics = ppo_clip_loss(
        logp,
        logp.detach(),
        torch.zeros(1, 2, dtype=F64),
        torch.ones(1, 2),
        logp_ref=ref,
        kl_coef=0.1,
    )
    assert loss.item() == pytest.approx(0.1 * k3)
    assert metrics["kl"] == pytest.approx(k3)
    assert metrics["approx_kl"] == pytest.approx(0.0)


def test_ppo_kl_without_reference_raises():
    logp, logp_old, adv, mask = _ppo_case()
    with pytest.raises(ValueError, match="kl_coef=0.01 > 0 needs logp_ref"):
        ppo_clip_loss(logp, logp_old, adv, mask, kl_coef=0.01)


def test_aggregation_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # row 2 has no valid token
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    with pytest.raises(ValueError, match="unknown loss aggregation 'mean'.*token-mean"):
        aggregate(loss, mask, "mean")


def test_ppo_respects_aggregation():
    logp = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    token, _ = ppo_clip_loss(logp, logp.detach(), adv, mask)
    seq, _ = ppo_clip_loss(logp, logp.detach(), adv, mask, agg="seq-mean-token-mean")
    assert token.item() == pytest.approx(-(3 + 4) / 4)
    assert seq.item() == pytest.approx(-(1 + 4) / 2)


def test_dual_clip_bounds_negative_advantages_by_c_as_verl():
    """verl's dual clip: for A < 0 the loss is min(max(-rho A, -clip(rho) A), -c A)."""
    ratios = torch.tensor([[10.0, 10.0, 2.0]], dtype=F64)
    logp = ratios.log().requires_grad_()
    adv = torch.tensor([[-1.0, 1.0, -1.0]], dtype=F64)
    mask = torch.ones_like(ratios, dtype=torch.bool)
    loss, metrics = ppo_clip_loss(logp, torch.zeros_like(ratios), adv, mask, clip_eps=0.2)
    # token 0: max(10, 0.8)=10, bounded by 3 | token 1: max(-10, -1.2) = -1.2 | token 2: 2 < 3
    assert loss.item() == pytest.approx((3.0 - 1.2 + 2.0) / 3)
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)
    off, off_metrics = ppo_clip_loss(logp, torch.zeros_like(ratios), adv, mask, clip_eps=0.2, clip_ratio_c=0)
    assert off.item() == pytest.approx((10.0 - 1.2 + 2.0) / 3) and off_metrics["dual_clip_frac"] == 0.0
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_clip_loss(logp, torch.zeros_like(ratios), adv, mask, clip_ratio_c=0.5)


def test_kl_clamps_as_verl_low_var_kl():
    """k3 clamped to at most 10; the log ratio to the reference clamped to +-20, so a huge
    gap gives a finite loss and a finite (zero) gradient instead of inf / NaN."""
    logp = torch.zeros(1, 1, dtype=F64, requires_grad=True)
    zeros, ones = torch.zeros(1, 1, dtype=F64), torch.ones(1, 1)

    def kl(ref, clamp):
        return ppo_clip_loss(logp, logp.detach(), zeros, ones, logp_ref=torch.full((1, 1), ref, dtype=F64),
                             kl_coef=1.0, kl_clamp=clamp)[0]

    assert kl(5.0, True).item() == pytest.approx(10.0)  # e^5 - 6 = 142.4 -> 10
    assert kl(5.0, False).item() == pytest.approx(math.exp(5) - 6)
    huge = kl(1000.0, True)
    (grad,) = torch.autograd.grad(huge, logp)
    assert huge.item() == pytest.approx(10.0) and torch.isfinite(grad).all()
    assert not math.isfinite(kl(1000.0, False).item())


def test_policy_loss_passes_the_dual_clip_and_kl_switches():
    from trainer.algos import LossInputs, get_method, policy_loss
    from trainer.config import AlgoConfig

    logp = torch.tensor([[math.log(10.0)]], dtype=F64, requires_grad=True)
    inputs = LossInputs(logp=logp, logp_old=torch.zeros(1, 1, dtype=F64),
                        advantages=-torch.ones(1, 1, dtype=F64), mask=torch.ones(1, 1, dtype=torch.bool))
    on, _ = policy_loss(get_method("grpo"), inputs, AlgoConfig(kl_coef=0.0))
    off, _ = policy_loss(get_method("grpo"), inputs, AlgoConfig(kl_coef=0.0, clip_ratio_c=0.0))
    assert (on.item(), off.item()) == (pytest.approx(3.0), pytest.approx(10.0))
