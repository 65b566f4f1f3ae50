"""GRPO: group-relative advantages and the clipped PPO surrogate with a k3 KL penalty.

References: SEED review, Eq. (RL-Adv) and Eq. (RL) (Shao et al. 2024); Dr.GRPO drops the
std normalisation (``std_mode="none"``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.config import AlgoConfig

from .inputs import CreditInputs
from .masked import aggregate, masked_mean
from .registry import register_advantage

STD_MODES = ("unbiased", "population", "none")


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index ``[B]`` in ``0..G-1`` and the number of groups G."""
    if group_ids.numel() == 0:
        raise ValueError("grpo_advantages needs at least one trajectory; got an empty batch")
    _, inv = torch.unique(group_ids, return_inverse=True)  # [B]
    return inv, int(inv.max()) + 1


def tied_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``[G]`` bool: groups whose rewards are all exactly equal (singletons included)."""
    inv, n_groups = _group_index(group_ids)
    hi = rewards.new_full((n_groups,), float("-inf")).scatter_reduce(0, inv, rewards, "amax")
    lo = rewards.new_full((n_groups,), float("inf")).scatter_reduce(0, inv, rewards, "amin")
    return hi == lo


def grpo_advantages(
    rewards: Tensor, group_ids: Tensor, eps: float = 1e-6, std_mode: str = "unbiased"
) -> Tensor:
    """Group-relative advantage A_n = (R_n - mean_q) / (std_q + eps) (SEED review Eq. RL-Adv).

    Args:
        rewards: ``[B]`` trajectory outcomes R(tau).
        group_ids: ``[B]`` group (task) id of each trajectory; any integers.
        eps: added to the group std.
        std_mode: ``unbiased`` (divide by the n-1 sample std, default), ``population``
            (the n std) or ``none`` (Dr.GRPO: A_n = R_n - mean_q, no division).

    Returns:
        ``[B]`` advantages.  A group whose rewards tie (including a singleton group) gets
        exactly 0, not a rounding residue.
    """
    if std_mode not in STD_MODES:
        raise ValueError(f"unknown std_mode {std_mode!r}; valid: {', '.join(STD_MODES)}")
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    inv, n_groups = _group_index(group_ids)
    zeros = rewards.new_zeros(n_groups)
    count = torch.bincount(inv, minlength=n_groups).to(rewards.dtype)  # [G]
    mean = zeros.index_add(0, inv, rewards) / count  # [G]
    centered = rewards - mean[inv]  # [B]
    if std_mode == "none":
        adv = centered
    else:
        sq = zeros.index_add(0, inv, centered**2)  # [G]
        denom = (count - 1).clamp(min=1) if std_mode == "unbiased" else count
        adv = centered / ((sq / denom).sqrt()[inv] + eps)
    return torch.where(tied_groups(rewards, group_ids)[inv], torch.zeros_like(adv), adv)


def ppo_clip_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    logp_ref: Tensor | None = None,
    kl_coef: float = 0.0,
    agg: str = "token-mean",
    clip_ratio_c: float = 3.0,
    kl_clamp: bool = True,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Token-level clipped PPO surrogate plus a k3 KL penalty (SEED review Eq. RL), with
    verl's dual clip and KL clamps (``verl/trainer/ppo/core_algos.py``).

    rho = exp(logp - logp_old);  L_pg = -min(rho * A, clip(rho, 1-eps, 1+eps) * A);
    dual clip (``clip_ratio_c`` = c > 1; 0 = off): for A < 0, L_pg = min(L_pg, -c * A), so a
    huge ratio on a negative-advantage token cannot blow the loss up (verl default c = 3);
    KL_k3 = exp(ref - logp) - (ref - logp) - 1 (low-variance, non-negative estimator of
    KL(pi_theta || pi_ref)); ``kl_clamp`` (verl's ``low_var_kl``): the log ratio ref - logp
    within +-20 and KL_k3 at most 10;  loss = agg(L_pg + kl_coef * KL_k3).

    Args:
        logp, logp_old, advantages, mask: ``[B, T]``; ``logp`` carries the gradient,
            ``logp_old`` and ``logp_ref`` are treated as constants.
        logp_ref: ``[B, T]`` reference log-probs; required when ``kl_coef > 0``.
        agg: ``token-mean`` | ``seq-mean-token-mean`` | ``seq-mean-token-sum``.
        weights: ``[B, T]`` per-token aggregation weights over a larger batch (a
            micro-batch's share, :func:`~trainer.algos.masked.aggregate`); None = ``agg``
            over these rows.

    Returns:
        ``(loss, metrics)`` with float metrics ``pg_loss``, ``clip_frac`` (share of valid
        tokens where the clipped branch is active), ``approx_kl`` (k3 of pi_old vs
        pi_theta), ``kl`` (k3 to the reference, 0 without one), ``ratio_mean``,
        ``ratio_max``, ``dual_clip_frac`` (share of valid tokens the dual clip bounds).
    """
    if clip_ratio_c and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c={clip_ratio_c} must be > 1 (verl: 3) or 0 to turn the dual clip off")
    if kl_coef > 0 and logp_ref is None:
        raise ValueError(f"kl_coef={kl_coef} > 0 needs logp_ref ([B, T]); pass it or set kl_coef=0")
    log_ratio = logp - logp_old.detach()
    ratio = torch.exp(log_ratio)
    unclipped = -ratio * advantages
    clipped = -torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    per_token = torch.maximum(unclipped, clipped)
    dual = torch.zeros_like(per_token, dtype=torch.bool)
    if clip_ratio_c:
        bound = -clip_ratio_c * advantages
        dual = (advantages < 0) & (per_token > bound)
        per_token = torch.where(advantages < 0, torch.minimum(per_token, bound), per_token)
    kl_tok = torch.zeros_like(logp)
    if logp_ref is not None:
        ref_gap = logp_ref.detach() - logp
        if kl_clamp:
            ref_gap = torch.clamp(ref_gap, -20.0, 20.0)
        kl_tok = torch.exp(ref_gap) - ref_gap - 1.0
        if kl_clamp:
            kl_tok = torch.clamp(kl_tok, max=10.0)
    loss = aggregate(per_token + kl_coef * kl_tok, mask, agg, weights)
    with torch.no_grad():
        m = mask.bool()
        metrics = {
            "pg_loss": aggregate(per_token, mask, agg, weights).item(),
            "clip_frac": masked_mean((clipped > unclipped).float(), m).item(),
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, m).item(),
            "kl": masked_mean(kl_tok, m).item(),
            "ratio_mean": masked_mean(ratio, m).item(),
            "ratio_max": ratio[m].max().item() if m.any() else 1.0,
            "dual_clip_frac": masked_mean(dual.float(), m).item(),
        }
    return loss, metrics


@register_advantage("grpo")
def grpo_estimator(inputs: CreditInputs, cfg: AlgoConfig) -> tuple[Tensor, dict[str, float]]:
    """GRPO trajectory advantage ``[B]`` with ``cfg.std_mode`` and ``cfg.adv_eps``."""
    adv = grpo_advantages(inputs.rewards, inputs.group_ids, cfg.adv_eps, cfg.std_mode)
    tied = tied_groups(inputs.rewards, inputs.group_ids)
    return adv, {"adv/tied_group_frac": tied.float().mean().item()}


@register_advantage("none")
def no_advantage(inputs: CreditInputs, cfg: AlgoConfig) -> tuple[Tensor, dict[str, float]]:
    """Zero advantage ``[B]``: methods without an RL term (pure OPSD) or without training."""
    rewards = inputs.rewards if inputs.rewards.is_floating_point() else inputs.rewards.float()
    return torch.zeros_like(rewards), {}
