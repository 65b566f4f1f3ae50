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


def aggregate(loss: Tensor, mask: Tensor, agg: str = "token-mean", weights: Tensor | None = None) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    * ``token-mean``: sum over all valid tokens / number of valid tokens (DESIGN.md default;
      ETRO App. B.2: tokens without OPD stay in the denominator);
    * ``seq-mean-token-mean``: per-row mean over its valid tokens, then mean over rows;
    * ``seq-mean-token-sum``: per-row sum over its valid tokens, then mean over rows.

    Rows with no valid token are left out of the sequence means.  ``weights`` ``[B, T]``:
    each token's share of an aggregation computed over a larger batch
    (:func:`aggregation_weights` of that batch, gathered to these tokens), so that the
    pieces of a split batch (micro-batches, data-parallel ranks) sum to the whole batch's
    loss: the result is then ``sum(loss * weights)`` over ``mask`` whatever ``agg`` is.
    """
    if agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss aggregation {agg!r}; valid: {', '.join(LOSS_AGGS)}")
    m = mask.bool()
    if weights is not None:
        return torch.where(m, loss * weights, torch.zeros_like(loss)).sum()
    if agg == "token-mean":
        return masked_mean(loss, mask)
    row_sum = torch.where(m, loss, torch.zeros_like(loss)).sum(dim=1)  # [B]
    row_n = m.sum(dim=1)  # [B]
    row = row_sum / row_n.clamp(min=1) if agg == "seq-mean-token-mean" else row_sum
    has_tokens = row_n > 0  # [B]
    return torch.where(has_tokens, row, torch.zeros_like(row)).sum() / has_tokens.sum().clamp(min=1)


def aggregation_weights(mask: Tensor, agg: str = "token-mean", tokens: Tensor | None = None,
                        rows: Tensor | None = None) -> Tensor:
    """Per-token weights ``[B, T]`` with ``aggregate(loss, mask, agg) == (loss * w)[mask].sum()``
    for this batch: 1 / (valid tokens) for ``token-mean``, 1 / (row's valid tokens x rows with
    tokens) for ``seq-mean-token-mean``, 1 / (rows with tokens) for ``seq-mean-token-sum``;
    0 off the mask.  ``tokens`` / ``rows``: those two counts over a larger batch this one is a
    part of (e.g. summed over data-parallel ranks); default: this batch's own.
    """
    if agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss aggregation {agg!r}; valid: {', '.join(LOSS_AGGS)}")
    m = mask.bool()
    row_n = m.sum(dim=1, keepdim=True).to(torch.float32)  # [B, 1]
    tokens = m.sum().to(torch.float32) if tokens is None else tokens
    rows = (row_n > 0).sum().to(torch.float32) if rows is None else rows
    if agg == "token-mean":
        per_row = tokens.clamp(min=1).expand_as(row_n)
    elif agg == "seq-mean-token-mean":
        per_row = row_n.clamp(min=1) * rows.clamp(min=1)
    else:
        per_row = rows.clamp(min=1).expand_as(row_n)
    return torch.where(m, 1.0 / per_row, torch.zeros((), dtype=torch.float32, device=mask.device))
