"""A SEED variant whose gate distils only the tokens the skill moves: |Delta| >= TAU.

docs/results/smollm2_warm_start.md found the skill's effect concentrated on few tokens (1.7%
of them moved by the skill); SEED's gate g = sigmoid(beta_opd * Delta) still weighs every
token, g = 0.5 where Delta = 0.  This method keeps SEED's loss (SEED review Eq. 1) on the
tokens with |Delta| >= TAU and gives the others none; they stay in the token-mean's
denominator, as the tokens of a trajectory without a valid skill do.  TAU = 0 is SEED.

A constant of the plugin, not a config key: changing it changes the plugin's source hash, so
the cells of ``seed_tau`` get new ids (docs/extending.md).
"""

from __future__ import annotations

import dataclasses

import torch

from trainer.plugins import (
    AlgoConfig,
    LossInputs,
    get_method,
    register_method,
    register_opd_loss,
    seed_opd_loss,
)

TAU = 1.0  # nats: |log pi(y | c, skill) - log pi(y | c)| a token must reach (diagnose skill's threshold)


def moved_tokens(inputs: LossInputs, tau: float) -> torch.Tensor:
    """``[B, T]`` bool: the OPD tokens whose teacher-student gap |Delta| is at least ``tau``."""
    mask = inputs.mask.bool()
    opd = mask if inputs.opd_mask is None else inputs.opd_mask.bool() & mask
    delta = torch.where(mask, inputs.logp_teacher - inputs.logp, torch.zeros_like(inputs.logp))  # [B, T]
    return opd & (delta.detach().abs() >= tau)


@register_opd_loss("seed_tau")
def thresholded_seed(inputs: LossInputs, cfg: AlgoConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """SEED's gated OPD on the tokens with |Delta| >= TAU (0 elsewhere, still counted in the
    aggregation over ``inputs.mask``, as ``algo.loss_agg`` says)."""
    if inputs.logp_teacher is None:
        raise ValueError("OPD loss 'seed_tau' needs LossInputs.logp_teacher ([B, T]); it is None")
    moved, mask = moved_tokens(inputs, TAU), inputs.mask.bool()
    opd = mask if inputs.opd_mask is None else inputs.opd_mask.bool() & mask
    shares = {"opd/token_frac": (moved.sum() / mask.sum().clamp(min=1)).item(),
              # of the tokens SEED would distil, the share the skill moves by TAU or more
              "opd/moved_frac": (moved.sum() / opd.sum().clamp(min=1)).item()}
    if not moved.any():
        return inputs.logp.sum() * 0.0, shares
    loss, metrics = seed_opd_loss(inputs.logp, inputs.logp_teacher, moved, cfg.beta_opd, agg=cfg.loss_agg,
                                  agg_mask=mask, weights=inputs.agg_weights)
    return loss, {**{f"opd/{k}": v for k, v in metrics.items()}, **shares}


register_method(dataclasses.replace(
    get_method("seed"),
    name="seed_tau",
    paper="SEED review Eq. 1 with a |Delta| >= tau token filter (this plugin; docs/extending.md)",
    summary=f"SEED whose gate distils only the tokens the skill moves by |Delta| >= {TAU}",
    label="SEED |Δ|≥τ",
    opd_loss="seed_tau",
))
