"""Auxiliary on-policy distillation (OPD) losses over sampled tokens.

Teacher and student are the same model under two contexts: the teacher sees the skill /
privileged context, the student the ordinary history; both score the *same* sampled tokens
(SEED review, "Skill-augmented re-scoring").  The teacher branch is always detached.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.config import AlgoConfig

from .inputs import LossInputs
from .masked import aggregate, masked_mean, masked_std
from .registry import register_opd_loss


def seed_gate(delta: Tensor, beta: float) -> Tensor:
    """SEED's confidence gate g = sigmoid(beta_opd * Delta) (SEED review, Eq. 1); any shape."""
    return torch.sigmoid(beta * delta)


def _teacher_gap(logp_student: Tensor, logp_teacher: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Detached teacher log-probs and Delta = sg(teacher - student), both ``[B, T]``.

    Off-mask teacher entries (possibly NaN) are replaced by the student's value, so that
    Delta = 0 there and no NaN reaches the backward pass.
    """
    teacher = torch.where(mask.bool(), logp_teacher, logp_student).detach()
    return teacher, teacher - logp_student.detach()


def _reduce(per_token: Tensor, mask: Tensor, agg: str, agg_mask: Tensor | None,
            weights: Tensor | None = None) -> Tensor:
    """``agg`` of ``per_token`` on ``mask`` over the tokens of ``agg_mask`` (default ``mask``):
    tokens of ``agg_mask`` outside ``mask`` count as 0 (they stay in the denominator);
    ``weights``: a micro-batch's aggregation weights (:func:`~.masked.aggregate`)."""
    agg_mask = mask if agg_mask is None else agg_mask
    return aggregate(torch.where(mask.bool(), per_token, torch.zeros_like(per_token)), agg_mask, agg, weights)


def seed_opd_loss(
    logp_student: Tensor, logp_teacher: Tensor, mask: Tensor, beta: float,
    agg: str = "token-mean", agg_mask: Tensor | None = None, weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SEED's confidence-gated OPD loss (SEED review Eq. 1, Algorithm 1 lines 21-25).

    Delta = sg(l_skill - l_theta),  g = sigmoid(beta * Delta) (detached),
    L_opd = token-mean over valid tokens of  g * (sg(l_skill) - l_theta).

    Its gradient is exactly ``-g * grad(l_theta) / n`` per valid token (n = number of valid
    tokens): a gate-weighted NLL on the student branch.

    Args:
        logp_student: ``[B, T]`` l_theta, log-prob of the sampled tokens, ordinary context.
        logp_teacher: ``[B, T]`` l_skill, same tokens under the skill context.
        mask: ``[B, T]`` valid action tokens.
        beta: gate sharpness beta_opd (paper: 5.0).
        agg / agg_mask: the policy loss's aggregation (``algo.loss_agg``, as the actor's)
            over ``agg_mask`` ``[B, T]`` (default ``mask``); token-mean is the above.
        weights: ``[B, T]`` a micro-batch's share of a larger batch's aggregation.

    Returns:
        ``(loss, metrics)``; metrics ``gate_mean``, ``gate_std``, ``delta_mean`` over valid tokens.
    """
    teacher, delta = _teacher_gap(logp_student, logp_teacher, mask)
    gate = seed_gate(delta, beta)
    loss = _reduce(gate * (teacher - logp_student), mask, agg, agg_mask, weights)
    metrics = {
        "gate_mean": masked_mean(gate, mask).item(),
        "gate_std": masked_std(gate, mask).item(),
        "delta_mean": masked_mean(delta, mask).item(),
    }
    return loss, metrics


def opsd_loss(
    logp_student: Tensor, logp_teacher: Tensor, mask: Tensor,
    agg: str = "token-mean", agg_mask: Tensor | None = None, weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Ungated sampled-token self-distillation (OPSD, Zhao et al. 2026a; SEED review baselines).

    The sampled-token estimate of the reverse KL(pi_theta || pi_teacher) with the teacher
    detached: with Delta = sg(l_teacher - l_theta), the per-token reward is Delta and the
    gradient is the score-function gradient ``-Delta * grad(l_theta) / n`` per valid token.
    Unlike SEED's gate g in (0, 1), Delta is signed and unbounded: tokens the teacher
    disfavours are pushed down.  The loss *value* is the k1 estimate mean(-Delta) of the
    reverse KL; the second term below is zero in value and carries the gradient.

    Args / shapes as :func:`seed_opd_loss`.  Metrics: ``delta_mean``, ``reverse_kl``.
    """
    _, delta = _teacher_gap(logp_student, logp_teacher, mask)
    surrogate = -delta * (logp_student - logp_student.detach())  # value 0, grad -Delta
    loss = _reduce(-delta, mask, agg, agg_mask, weights) + _reduce(surrogate, mask, agg, agg_mask, weights)
    metrics = {
        "delta_mean": masked_mean(delta, mask).item(),
        "reverse_kl": masked_mean(-delta, mask).item(),
    }
    return loss, metrics


def opsd_topk_loss(
    topk_student: Tensor, topk_teacher: Tensor, mask: Tensor,
    agg: str = "token-mean", agg_mask: Tensor | None = None, weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """OPSD's distribution matching on the teacher's top-k support (``algo.opsd_top_k``).

    At every action token the teacher's k most likely next tokens (ids chosen by the teacher,
    log-probs ``topk_teacher`` ``[B, T, k]``, detached) and the student's log-probs of the
    same ids (``topk_student`` ``[B, T, k]``, with gradient) are renormalised over those k
    ids (q_S, q_T); the per-token loss is the exact reverse KL

        KL(q_S || q_T) = sum_v q_S(v) (log q_S(v) - log q_T(v)),

    which the sampled-token :func:`opsd_loss` estimates from one token.  Metrics:
    ``reverse_kl`` (mean per token), ``topk_mass`` (teacher probability the k ids hold,
    the share of the distribution that is matched).
    """
    teacher = torch.where(mask.bool()[..., None], topk_teacher, torch.zeros_like(topk_teacher)).detach()
    log_qt = torch.log_softmax(teacher, dim=-1)
    log_qs = torch.log_softmax(torch.where(mask.bool()[..., None], topk_student,
                                           torch.zeros_like(topk_student)), dim=-1)
    per_token = (log_qs.exp() * (log_qs - log_qt)).sum(-1)  # [B, T]
    loss = _reduce(per_token, mask, agg, agg_mask, weights)
    metrics = {"reverse_kl": masked_mean(per_token.detach(), mask).item(),
               "topk_mass": masked_mean(teacher.exp().sum(-1), mask).item()}
    return loss, metrics


def _teacher(inputs: LossInputs, who: str) -> Tensor:
    if inputs.logp_teacher is None:
        raise ValueError(f"OPD loss {who!r} needs LossInputs.logp_teacher ([B, T]); it is None")
    return inputs.logp_teacher


def _on_opd_tokens(loss_fn, inputs: LossInputs, cfg: AlgoConfig, *args) -> tuple[Tensor, dict[str, float]]:
    """Apply ``loss_fn`` on ``inputs.opd_mask``, aggregated like the policy loss
    (``cfg.loss_agg``) over all of ``inputs.mask``: tokens without OPD stay in the
    denominator (ETRO App. B.2; OPD is aggregated as the actor's loss)."""
    mask = inputs.mask.bool()
    opd = mask if inputs.opd_mask is None else inputs.opd_mask.bool() & mask
    n_opd, n_all = opd.sum(), mask.sum().clamp(min=1)
    if n_opd == 0:
        return inputs.logp.sum() * 0.0, {"opd/token_frac": 0.0}
    loss, m = loss_fn(inputs.logp, inputs.logp_teacher, opd, *args, agg=cfg.loss_agg, agg_mask=mask,
                      weights=inputs.agg_weights)
    metrics = {f"opd/{k}": v for k, v in m.items()}
    metrics["opd/token_frac"] = (n_opd / n_all).item()
    return loss, metrics


@register_opd_loss("seed")
def gated_opd(inputs: LossInputs, cfg: AlgoConfig) -> tuple[Tensor, dict[str, float]]:
    """SEED's gated loss (SEED family, gated_static), :func:`seed_opd_loss` with ``cfg.beta_opd``."""
    _teacher(inputs, "seed")
    return _on_opd_tokens(seed_opd_loss, inputs, cfg, cfg.beta_opd)


@register_opd_loss("opsd")
def ungated_opd(inputs: LossInputs, cfg: AlgoConfig) -> tuple[Tensor, dict[str, float]]:
    """OPSD / GRPO+OPSD / Skill-SD ungated loss: distribution matching on the teacher's
    top-k (:func:`opsd_topk_loss`) when the inputs carry it (``algo.opsd_top_k`` > 0), else
    the sampled-token :func:`opsd_loss`."""
    _teacher(inputs, "opsd")
    if cfg.opsd_top_k > 0:
        if inputs.topk_logp is None or inputs.topk_logp_teacher is None:
            raise ValueError("algo.opsd_top_k > 0 needs LossInputs.topk_logp and "
                             "topk_logp_teacher ([B, T, k])")
        return _on_opd_tokens(_topk_pair(inputs), inputs, cfg)
    return _on_opd_tokens(opsd_loss, inputs, cfg)


def _topk_pair(inputs: LossInputs):
    """:func:`opsd_topk_loss` in the ``(student, teacher, mask, ...)`` form of
    :func:`_on_opd_tokens`, reading the [B, T, k] inputs."""
    def loss_fn(logp, logp_teacher, mask, agg, agg_mask, weights):
        return opsd_topk_loss(inputs.topk_logp, inputs.topk_logp_teacher, mask, agg, agg_mask, weights)
    return loss_fn
