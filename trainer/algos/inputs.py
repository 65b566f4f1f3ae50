"""Inputs of the registered algorithm parts: small frozen dataclasses of tensors.

Shapes: ``B`` trajectories (or samples) in the batch, ``T`` token positions per row.  Every
``[B, T]`` tensor is aligned with ``mask``; ``mask`` is True (or 1) exactly on the policy's
action tokens (never observation or padding tokens).  Shapes are checked on construction so
that a misaligned batch fails at the boundary with the field name in the message.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor


def _check_shapes(obj: object, ndim: dict[str, int]) -> None:
    """Check that the fields named in ``ndim`` agree on B (and T for 2-D fields)."""
    mask = obj.mask
    if mask.dim() != 2:
        raise ValueError(f"{type(obj).__name__}.mask must be [B, T], got shape {tuple(mask.shape)}")
    want = {1: tuple(mask.shape[:1]), 2: tuple(mask.shape)}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name not in ndim or value is None:
            continue
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{type(obj).__name__}.{f.name} must be a torch.Tensor, got {type(value).__name__}"
            )
        if tuple(value.shape) != want[ndim[f.name]]:
            raise ValueError(
                f"{type(obj).__name__}.{f.name} has shape {tuple(value.shape)}; "
                f"expected {list(want[ndim[f.name]])} to match mask {list(mask.shape)}"
            )


@dataclass(frozen=True)
class CreditInputs:
    """Everything an advantage estimator or token-credit rule may read.

    Attributes:
        rewards: ``[B]`` float, trajectory outcome R(tau).
        group_ids: ``[B]`` long, the GRPO group (task) each trajectory belongs to.
        mask: ``[B, T]`` bool/0-1, valid action tokens.
        turn_ids: ``[B, T]`` long, zero-based turn index of each token, -1 off action tokens.
        success: ``[B]`` bool, the verifier's binary outcome.
        error_turn: ``[B]`` long, writer-estimated first unrecovered decisive error k_i
            (ETRO Sec. 3.4); ``-1`` = no valid boundary (k = infinity).  Read only for
            failed trajectories.  A Negative skill exists exactly when k_i >= 0.
        delta_pos / delta_neg / delta_priv: ``[B, T]`` teacher-student log-prob gaps
            Delta = log pi_old(y | c, z) - log pi_old(y | c) under the Positive skill, the
            Negative skill, and the privileged context; None when the method does not score
            that context.  Values off ``mask`` are ignored (may be NaN).
        step: the current RL update index (RLSD's decay schedule).
        generator: a ``torch.Generator`` for rules that draw random turns (ETRO's Random
            Boundary and Negative-placement ablations), so that draws are reproducible.
    """

    rewards: Tensor
    group_ids: Tensor
    mask: Tensor
    turn_ids: Tensor
    success: Tensor
    error_turn: Tensor
    delta_pos: Tensor | None = None
    delta_neg: Tensor | None = None
    delta_priv: Tensor | None = None
    step: int = 0
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        _check_shapes(
            self,
            {
                "rewards": 1,
                "group_ids": 1,
                "success": 1,
                "error_turn": 1,
                "turn_ids": 2,
                "delta_pos": 2,
                "delta_neg": 2,
                "delta_priv": 2,
            },
        )

    @property
    def valid(self) -> Tensor:
        """``[B, T]`` bool: action tokens that carry a turn index."""
        return self.mask.bool() & (self.turn_ids >= 0)

    def need(self, name: str, who: str) -> Tensor:
        """The optional tensor field ``name``, or a ValueError saying ``who`` needs it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{who} needs CreditInputs.{name} ([B, T]); it is None")
        return value


@dataclass(frozen=True)
class LossInputs:
    """Everything a policy loss may read (one PPO minibatch).

    Attributes:
        logp: ``[B, T]`` log pi_theta of the sampled tokens under the ordinary context
            (the student branch; carries the gradient).
        logp_old: ``[B, T]`` log pi_old of the same tokens (behaviour policy, detached).
        advantages: ``[B, T]`` token advantages from :func:`trainer.algos.token_advantages`.
        mask: ``[B, T]`` bool/0-1, valid action tokens.
        logp_ref: ``[B, T]`` log pi_ref for the KL penalty; required when ``kl_coef > 0``.
        logp_teacher: ``[B, T]`` log-prob of the same tokens under the method's skill
            context (teacher branch); detached inside the losses.
        opd_mask: ``[B, T]`` the valid tokens that receive OPD (a trajectory whose writer
            output was invalid gets none); None = all of ``mask``.  Tokens outside it stay
            in the token-mean denominator.
        topk_logp / topk_logp_teacher: ``[B, T, k]`` the student's (with gradient) and the
            teacher's log-probs of the teacher's k most likely tokens at each position
            (OPSD's distribution matching, ``algo.opsd_top_k``); None otherwise.
        agg_weights: ``[B, T]`` each token's share of the loss aggregation over the whole
            PPO minibatch (:func:`~trainer.algos.masked.aggregation_weights`) when these
            rows are one micro-batch of it: the losses are then ``sum(per-token * weight)``,
            and the micro-batches' losses sum to the minibatch's.  None = aggregate over
            these rows alone (``algo.loss_agg``; a row is a trajectory).
    """

    logp: Tensor
    logp_old: Tensor
    advantages: Tensor
    mask: Tensor
    logp_ref: Tensor | None = None
    logp_teacher: Tensor | None = None
    opd_mask: Tensor | None = None
    topk_logp: Tensor | None = None
    topk_logp_teacher: Tensor | None = None
    agg_weights: Tensor | None = None

    def __post_init__(self) -> None:
        _check_shapes(self, {"logp": 2, "logp_old": 2, "advantages": 2, "logp_ref": 2,
                             "logp_teacher": 2, "opd_mask": 2, "agg_weights": 2})
        for name in ("topk_logp", "topk_logp_teacher"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape[:2]) != tuple(self.mask.shape):
                raise ValueError(f"LossInputs.{name} has shape {tuple(value.shape)}; expected "
                                 f"[{', '.join(map(str, self.mask.shape))}, k] to match mask")
        if (self.topk_logp is None) != (self.topk_logp_teacher is None) or (
                self.topk_logp is not None and self.topk_logp.shape != self.topk_logp_teacher.shape):
            raise ValueError("LossInputs.topk_logp and topk_logp_teacher come together, same shape")
