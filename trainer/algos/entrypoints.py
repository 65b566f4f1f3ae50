"""The two entry points the trainer calls; neither branches on method names.

``token_advantages`` runs in the advantage phase (once per batch), ``policy_loss`` in each
PPO minibatch.  Both resolve the method-dependent config values first
(:func:`~trainer.algos.methods.resolve_algo`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.config import AlgoConfig

from .grpo import ppo_clip_loss
from .inputs import CreditInputs, LossInputs
from .masked import masked_mean, masked_std
from .methods import MethodSpec, resolve_algo
from .registry import ADVANTAGES, CREDITS, OPD_LOSSES


def token_advantages(
    spec: MethodSpec, inputs: CreditInputs, algo_cfg: AlgoConfig
) -> tuple[Tensor, dict[str, float]]:
    """Per-token advantages ``[B, T]`` for ``spec``.

    The registered trajectory advantage ``[B]`` (GRPO Eq. RL-Adv, or 0) is broadcast to the
    valid action tokens (SEED review: A_{q,n,t,l} = A_{q,n} m_{q,n,t,l}); then the method's
    token-credit rule, if any, reshapes it (ETRO: + lambda * A_OPD; RLSD: bounded scale).

    Returns ``(adv, metrics)``: ``adv`` is 0 off the mask; metrics include ``adv/mean``,
    ``adv/std`` over valid tokens, ``adv/tied_group_frac`` and the rule's ``opd/*`` keys.
    """
    cfg = resolve_algo(spec, algo_cfg)
    traj_adv, metrics = ADVANTAGES.get(spec.advantage)(inputs, cfg)  # [B]
    mask = inputs.mask.bool()
    adv = torch.where(
        mask, traj_adv[:, None].expand_as(mask), torch.zeros_like(traj_adv)[:, None]
    )  # [B, T]
    if spec.credit is not None:
        adv, credit_metrics = CREDITS.get(spec.credit)(inputs, cfg, adv)
        metrics.update(credit_metrics)
    metrics["adv/mean"] = masked_mean(adv, mask).item()
    metrics["adv/std"] = masked_std(adv, mask).item()
    return adv, metrics


def policy_loss(
    spec: MethodSpec, inputs: LossInputs, algo_cfg: AlgoConfig
) -> tuple[Tensor, dict[str, float]]:
    """The minibatch loss for ``spec`` (SEED review Eq. SEED: L = L_rl + lambda_opd * L_opd):
    the sum of :func:`policy_loss_terms`.

    Returns ``(loss, metrics)``: ``loss/total``, ``loss/rl``, ``loss/opd``, ``ppo/*`` and
    ``opd/*`` floats.
    """
    terms, metrics = policy_loss_terms(spec, inputs, algo_cfg)
    return sum(terms.values(), inputs.logp.new_zeros(())), metrics


def policy_loss_terms(
    spec: MethodSpec, inputs: LossInputs, algo_cfg: AlgoConfig
) -> tuple[dict[str, Tensor], dict[str, float]]:
    """The terms of the minibatch loss, each as it enters the sum: ``"rl"`` (the clipped PPO
    surrogate with the k3 KL penalty, when ``uses_rl``) and ``"opd"`` (lambda_opd times the
    method's registered auxiliary loss: SEED/SDAR gated, OPSD/Skill-SD ungated).  Pure OPSD
    has no L_rl.  Methods that do not train (Vanilla, Skill-Prompt) raise.  The trainer
    back-propagates the terms one at a time when it measures their gradients apart
    (``tracking.gradient_parts``).

    Returns ``(terms, metrics)``; metrics as :func:`policy_loss`'s.
    """
    if not spec.trains:
        raise ValueError(
            f"method {spec.name!r} does not train (MethodSpec.trains is False); skip the update"
        )
    cfg = resolve_algo(spec, algo_cfg)
    terms: dict[str, Tensor] = {}
    metrics: dict[str, float] = {}
    if spec.uses_rl:
        rl, ppo = ppo_clip_loss(
            inputs.logp,
            inputs.logp_old,
            inputs.advantages,
            inputs.mask,
            clip_eps=cfg.clip_eps,
            logp_ref=inputs.logp_ref,
            kl_coef=cfg.kl_coef,
            agg=cfg.loss_agg,
            clip_ratio_c=cfg.clip_ratio_c,
            kl_clamp=cfg.kl_clamp,
            weights=inputs.agg_weights,
        )
        terms["rl"] = rl
        metrics["loss/rl"] = rl.detach().item()
        metrics.update({f"ppo/{k}": v for k, v in ppo.items()})
    if spec.opd_loss is not None:
        opd, opd_metrics = OPD_LOSSES.get(spec.opd_loss)(inputs, cfg)
        terms["opd"] = cfg.lambda_opd * opd
        metrics["loss/opd"] = opd.detach().item()
        metrics.update(opd_metrics)
    metrics["loss/total"] = sum(t.detach().item() for t in terms.values())
    return terms, metrics
