"""Masked reductions shared by the losses and credit rules (all shapes ``[B, T]``)."""

from __future__ import annotations

import torch
from torch import Tensor

LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over the True entries of ``mask`` (0 when the mask is empty).

    Entries off the mask are never read, so NaN padding there does not leak in.
    """
    m = mask.bool()
    return torch.where(m, x, torch.zeros_like(x)).sum() / m.sum().clamp(min=1)


def masked_std(x: Tensor, mask: Tensor) -> Tensor:
    """Population standard deviation of ``x`` over ``mask`` (0 when the mask is empty)."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask).sqrt()


def aggregate(loss: Tensor, mask: Tensor, agg: str = "token-mean") -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    * ``token-mean``: sum over all valid tokens / number of valid tokens (DESIGN.md default;
      ETRO App. B.2: tokens without OPD stay in the denominator);
    * ``seq-mean-token-mean``: per-row mean over its valid tokens, then mean over rows;
    * ``seq-mean-token-sum``: per-row sum over its valid tokens, then mean over rows.

    Rows with no valid token are left out of the sequence means.
    """
    if agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss aggregation {agg!r}; valid: {', '.join(LOSS_AGGS)}")
    if agg == "token-mean":
        return masked_mean(loss, mask)
    m = mask.bool()
    row_sum = torch.where(m, loss, torch.zeros_like(loss)).sum(dim=1)  # [B]
    row_n = m.sum(dim=1)  # [B]
    row = row_sum / row_n.clamp(min=1) if agg == "seq-mean-token-mean" else row_sum
    has_tokens = row_n > 0  # [B]
    return torch.where(has_tokens, row, torch.zeros_like(row)).sum() / has_tokens.sum().clamp(min=1)
