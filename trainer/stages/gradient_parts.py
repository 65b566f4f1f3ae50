"""The update's gradient term by term (``tracking.gradient_parts``): which term of the loss
moves the policy.

The loss of a minibatch is a sum of terms (:func:`trainer.algos.policy_loss_terms`: the RL
term, PPO with its KL penalty, and lambda_opd times the OPD loss).  Their gradients add, and
AdamW then divides each parameter's step by its own running gradient scale, so a term's
share of the step is not its share of the loss: on AdamW's first step every parameter moves
by about lr * sign(g), whatever |g| is.  This module back-propagates the terms one at a time,
keeps each term's gradient, and leaves their sum in ``.grad`` for the optimizer step, so the
step taken is the one an ordinary backward would have taken (up to floating-point order).

Metrics, per optimizer step (each ``update/grad_*``):

* ``grad_norm_<term>``: the L2 norm of the term's gradient over the trainable parameters;
* ``grad_ratio_opd_rl``: ||g_opd|| / ||g_rl||;
* ``grad_cos_opd_rl``: the cosine between the two;
* ``grad_sign_flip_opd``: the share of the trainable entries with a nonzero summed gradient
  whose sign differs from the RL term's alone: the entries where adding the OPD term turns
  AdamW's first-step direction around (an entry where g_rl is 0 counts as flipped when the
  sum is not).

One process only: sharded gradients would need the norms gathered over the ranks.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

RL, OPD = "rl", "opd"


class GradientParts:
    """Accumulates each loss term's gradient over a minibatch's micro-batches."""

    def __init__(self, params: Iterable[torch.nn.Parameter]):
        self.params = [p for p in params if p.requires_grad]
        self.sums: dict[str, list[Tensor]] = {}

    def backward(self, terms: dict[str, Tensor], scale: float = 1.0) -> None:
        """Back-propagate ``terms`` (name -> scalar loss) one at a time, adding each one's
        gradient (times ``scale``) to its running sum; ``.grad`` is left empty."""
        names = list(terms)
        for i, name in enumerate(names):
            (terms[name] * scale).backward(retain_graph=i < len(names) - 1)
            acc = self.sums.setdefault(name, [torch.zeros_like(p) for p in self.params])
            for a, p in zip(acc, self.params):
                if p.grad is not None:
                    a += p.grad
                    p.grad = None

    def restore(self) -> dict[str, float]:
        """Put the terms' summed gradient in ``.grad`` (as one backward of the sum would) and
        return the ``update/grad_*`` metrics of the module docstring."""
        total = [torch.stack([s[i] for s in self.sums.values()]).sum(0) for i in range(len(self.params))]
        for p, g in zip(self.params, total):
            p.grad = g
        flat = {name: torch.cat([g.flatten().double() for g in grads]) for name, grads in self.sums.items()}
        metrics = {f"update/grad_norm_{name}": float(v.norm()) for name, v in flat.items()}
        if RL in flat and OPD in flat:
            rl, opd = flat[RL], flat[OPD]
            summed = rl + opd
            moved = summed != 0
            metrics["update/grad_ratio_opd_rl"] = float(opd.norm() / rl.norm()) if rl.norm() > 0 else float("inf")
            metrics["update/grad_cos_opd_rl"] = float(torch.nn.functional.cosine_similarity(rl, opd, dim=0))
            flipped = moved & (torch.sign(summed) != torch.sign(rl))
            metrics["update/grad_sign_flip_opd"] = float(flipped.sum() / moved.sum().clamp(min=1))
        self.sums = {}
        return metrics
