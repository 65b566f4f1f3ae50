"""Token-credit rules: ETRO's routed OPD credit and its ablations, and RLSD's modulation.

Every rule has the signature ``fn(inputs: CreditInputs, cfg: AlgoConfig, adv [B, T]) ->
(adv [B, T], metrics)`` and receives the GRPO advantage already broadcast to the valid
tokens.  ETRO-family rules add ``lambda * A_OPD`` (ETRO Sec. 3.4, App. B.2: "adds the routed
OPD token advantages to the GRPO advantages"); tokens without OPD keep their GRPO advantage.

Regions of a trajectory i with error boundary k_i (ETRO Sec. 3.4):

* ``success``: every turn of a successful trajectory;
* ``no_boundary``: every turn of a failed trajectory whose writer found no valid boundary
  (k_i = infinity, encoded ``error_turn < 0``);
* ``prefix`` t < k_i, ``error`` t = k_i, ``suffix`` t > k_i of a failed trajectory with k_i >= 0.

A Negative skill exists exactly for failed trajectories with a boundary (ETRO App. A: no
boundary -> empty ``step_skills``), so Negative credit only ever lands on those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.config import AlgoConfig

from .inputs import CreditInputs
from .masked import masked_mean
from .registry import register_credit

SUFFIX_SKILLS = ("positive", "negative")


@dataclass(frozen=True)
class Regions:
    """``[B, T]`` bool region masks, each restricted to valid action tokens."""

    success: Tensor
    no_boundary: Tensor
    prefix: Tensor
    error: Tensor
    suffix: Tensor

    @property
    def positive(self) -> Tensor:
        """Where ETRO routes the Positive skill: success, no boundary, and t < k."""
        return self.success | self.no_boundary | self.prefix

    @property
    def bounded(self) -> Tensor:
        """All turns of failed trajectories with a valid boundary."""
        return self.prefix | self.error | self.suffix


def trajectory_regions(
    turn_ids: Tensor, mask: Tensor, success: Tensor, error_turn: Tensor
) -> Regions:
    """Split the valid tokens into ETRO's regions.

    Args:
        turn_ids: ``[B, T]`` turn index per token, -1 off action tokens.
        mask: ``[B, T]`` valid action tokens.
        success: ``[B]`` bool.
        error_turn: ``[B]`` long, k_i; negative = no boundary; ignored when successful.
    """
    valid = mask.bool() & (turn_ids >= 0)  # [B, T]
    ok = success.bool()[:, None]  # [B, 1]
    has_k = (~success.bool() & (error_turn >= 0))[:, None]  # [B, 1]
    k = error_turn[:, None]  # [B, 1]
    return Regions(
        success=valid & ok,
        no_boundary=valid & ~ok & ~has_k,
        prefix=valid & has_k & (turn_ids < k),
        error=valid & has_k & (turn_ids == k),
        suffix=valid & has_k & (turn_ids > k),
    )


def _on(region: Tensor, delta: Tensor) -> Tensor:
    """``delta`` on ``region`` and 0 elsewhere (NaN-safe: off-region values are never read)."""
    return torch.where(region, delta, torch.zeros_like(delta))


def etro_opd_advantages(
    delta_pos: Tensor,
    delta_neg: Tensor,
    turn_ids: Tensor,
    mask: Tensor,
    success: Tensor,
    error_turn: Tensor,
    suffix_weight: float = 0.0,
    suffix_skill: str = "positive",
) -> Tensor:
    """ETRO's routed OPD token advantage A^OPD (ETRO Sec. 3.4; Sec. 4.3 for alpha).

    A^OPD_{i,t,j} = Delta+ if tau_i succeeds; Delta+ if it fails and t < k_i; Delta- if it
    fails and t = k_i; alpha * Delta^{suffix_skill} if it fails and t > k_i (alpha =
    ``suffix_weight``, 0 = ETRO's truncation); failed trajectories without a valid boundary
    (``error_turn < 0``) get Delta+ throughout.

    Args:
        delta_pos, delta_neg: ``[B, T]`` Delta^p = log pi_old(y | c, z^p) - log pi_old(y | c).
        turn_ids: ``[B, T]`` long turn index, -1 off action tokens.
        mask: ``[B, T]`` valid action tokens.
        success: ``[B]`` bool.  error_turn: ``[B]`` long k_i (-1 = none).
        suffix_skill: ``positive`` or ``negative``.

    Returns:
        ``[B, T]`` A^OPD, 0 off the valid tokens (before the coefficient lambda).
    """
    if suffix_skill not in SUFFIX_SKILLS:
        raise ValueError(
            f"unknown suffix_skill {suffix_skill!r}; valid: {', '.join(SUFFIX_SKILLS)}"
        )
    r = trajectory_regions(turn_ids, mask, success, error_turn)
    suffix_delta = delta_pos if suffix_skill == "positive" else delta_neg
    return (
        _on(r.positive, delta_pos)
        + _on(r.error, delta_neg)
        + suffix_weight * _on(r.suffix, suffix_delta)
    )


# --- ETRO routing rules -------------------------------------------------------------------
# Each maps (inputs, cfg) -> A_OPD [B, T]; ``_additive`` turns it into a credit rule.

Route = Callable[[CreditInputs, AlgoConfig], Tensor]


def _regions(inputs: CreditInputs, error_turn: Tensor | None = None) -> Regions:
    k = inputs.error_turn if error_turn is None else error_turn
    return trajectory_regions(inputs.turn_ids, inputs.mask, inputs.success, k)


def _n_turns(inputs: CreditInputs) -> Tensor:
    """``[B]`` number of turns of each row (max turn index on valid tokens + 1)."""
    turns = inputs.turn_ids.masked_fill(~inputs.valid, -1)  # [B, T]
    return turns.max(dim=1).values + 1


def _uniform_turn(inputs: CreditInputs, low: Tensor, high: Tensor, who: str) -> Tensor:
    """``[B]`` long, one draw per row uniform on ``[low, high)`` (rows with low >= high get low).

    One uniform per row is always drawn from ``inputs.generator`` so draws are reproducible.
    """
    if inputs.generator is None:
        raise ValueError(
            f"{who} draws random turns: pass CreditInputs.generator (a torch.Generator)"
        )
    u = torch.rand(low.shape, generator=inputs.generator, device=inputs.generator.device)
    span = (high - low).clamp(min=1)
    return low + torch.minimum((u.to(low.device) * span).long(), span - 1)


def _with_negative_at(inputs: CreditInputs, neg_turn: Tensor) -> Tensor:
    """ETRO routing with the one-turn Negative mask moved to ``neg_turn`` ``[B]`` (Sec. 4.4).

    "Only the location of Negative supervision varies; the supervised turn count remains
    fixed": ETRO supervises k + 1 turns of a bounded failure (Positive on t < k, Negative at
    k).  Moved into the prefix (j < k), Negative and Positive swap turns: Positive covers
    t <= k except j, so the count stays k + 1.  Moved into the suffix (j > k), Positive stays
    on t < k and k gets no OPD (again k + 1).  Success / no-boundary rows are unchanged.
    """
    r = _regions(inputs)
    neg = r.bounded & (inputs.turn_ids == neg_turn[:, None])  # [B, T]
    moved_before_k = (neg_turn < inputs.error_turn)[:, None]  # [B, 1]
    pos = (r.positive | (r.error & moved_before_k)) & ~neg
    return _on(pos, inputs.need("delta_pos", "ETRO")) + _on(neg, inputs.need("delta_neg", "ETRO"))


def _additive(route: Route) -> Callable:
    """Credit rule A = A_GRPO + lambda * A_OPD from a routing rule (ETRO App. B.2)."""

    def credit(
        inputs: CreditInputs, cfg: AlgoConfig, adv: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        if cfg.lambda_opd is None:
            raise ValueError(
                "lambda_opd is None: resolve the AlgoConfig with trainer.algos.resolve_algo first"
            )
        a_opd = route(inputs, cfg)  # [B, T]
        valid = inputs.valid
        metrics = region_metrics(inputs, cfg)
        metrics["opd/credit_frac"] = masked_mean((a_opd != 0).float(), valid).item()
        metrics["opd/credit_abs_mean"] = masked_mean(a_opd.abs(), valid).item()
        return adv + cfg.lambda_opd * a_opd, metrics

    credit.__doc__ = f"A_GRPO + lambda * A_OPD with A_OPD from: {route.__doc__}"
    credit.__wrapped__ = route  # where the rule's code is (``hindsight methods`` points there)
    return credit


ETRO_ROUTES: dict[str, Route] = {}  # credit-rule name -> its routing rule A_OPD


def register_route(name: str) -> Callable[[Route], Route]:
    """Register the routing rule below it as the credit rule ``name``, A = A_GRPO + lambda *
    A_OPD (:func:`_additive`); the rule itself is returned unchanged."""
    def decorate(route: Route) -> Route:
        register_credit(name)(_additive(route))
        ETRO_ROUTES[name] = route
        return route
    return decorate


@register_route("etro")
def route_etro(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """ETRO (Sec. 3.4) with the suffix weight alpha = ``cfg.suffix_weight`` (Sec. 4.3)."""
    return etro_opd_advantages(
        inputs.need("delta_pos", "etro"),
        inputs.need("delta_neg", "etro"),
        inputs.turn_ids,
        inputs.mask,
        inputs.success,
        inputs.error_turn,
        cfg.suffix_weight,
        cfg.suffix_skill,
    )


@register_route("etro_global_positive")
def route_global_positive(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Global Positive (ETRO Table 2): Delta+ on every valid token of every trajectory."""
    return _on(inputs.valid, inputs.need("delta_pos", "etro_global_positive"))


@register_route("etro_global_negative")
def route_global_negative(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Global Negative (ETRO Table 2): Delta- throughout each failed trajectory that has a
    Negative skill; successful trajectories have none and get no OPD."""
    return _on(_regions(inputs).bounded, inputs.need("delta_neg", "etro_global_negative"))


@register_route("etro_global_both")
def route_global_both(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Global Both (ETRO Sec. 4.3): (Delta+ + Delta-) / 2 throughout failed trajectories with
    both skills, Delta+ on successful ones (and on failed ones without a Negative skill)."""
    r = _regions(inputs)
    d_pos = inputs.need("delta_pos", "etro_global_both")
    d_neg = inputs.need("delta_neg", "etro_global_both")
    return _on(r.success | r.no_boundary, d_pos) + _on(r.bounded, 0.5 * (d_pos + d_neg))


@register_route("etro_positive_only")
def route_positive_only(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Positive Only (ETRO Table 2): ETRO without the Negative branch."""
    return _on(_regions(inputs).positive, inputs.need("delta_pos", "etro_positive_only"))


@register_route("etro_negative_only")
def route_negative_only(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Negative Only (ETRO Table 2): Delta- at the diagnosed error turn only."""
    return _on(_regions(inputs).error, inputs.need("delta_neg", "etro_negative_only"))


@register_route("etro_random_boundary")
def route_random_boundary(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Random Boundary (ETRO Sec. 4.3): ETRO's Positive-Negative-Off routing, with each failed
    trajectory that has a boundary split at a turn drawn uniformly from its turns instead."""
    n = _n_turns(inputs)
    k = _uniform_turn(inputs, torch.zeros_like(n), n, "etro_random_boundary")
    has_k = ~inputs.success.bool() & (inputs.error_turn >= 0)
    k = torch.where(has_k, k, inputs.error_turn)
    return etro_opd_advantages(
        inputs.need("delta_pos", "etro_random_boundary"),
        inputs.need("delta_neg", "etro_random_boundary"),
        inputs.turn_ids,
        inputs.mask,
        inputs.success,
        k,
        0.0,
    )


def _placement(inputs: CreditInputs, where: str) -> Tensor:
    """Negative placement (ETRO Sec. 4.4, Fig. 4): for failed trajectories with a non-empty
    prefix and suffix (1 <= k <= n-2), the Negative turn is drawn uniformly from the prefix
    (``prefix``) or the suffix (``suffix``); other trajectories keep it at k."""
    k, n = inputs.error_turn, _n_turns(inputs)
    eligible = ~inputs.success.bool() & (k >= 1) & (k <= n - 2)
    low, high = (torch.zeros_like(k), k) if where == "prefix" else (k + 1, n)
    j = _uniform_turn(inputs, low, high, f"etro_neg_{where}")
    return _with_negative_at(inputs, torch.where(eligible, j, k))


@register_route("etro_neg_prefix")
def route_neg_prefix(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Negative at a random pre-error turn (ETRO Fig. 4, "prefix placement")."""
    return _placement(inputs, "prefix")


@register_route("etro_neg_suffix")
def route_neg_suffix(inputs: CreditInputs, cfg: AlgoConfig) -> Tensor:
    """Negative at a random post-error turn (ETRO Fig. 4, "suffix placement")."""
    return _placement(inputs, "suffix")


def region_metrics(inputs: CreditInputs, cfg: AlgoConfig) -> dict[str, float]:
    """Mean skill gaps per region of the diagnosed boundary (ETRO Fig. 1 diagnostics).

    ``opd/delta_prefix`` (Delta+ for t < k), ``opd/delta_error`` (Delta- at k),
    ``opd/delta_suffix`` (Delta of ``cfg.suffix_skill`` for t > k); a key is left out when
    its region is empty or its Delta was not scored.
    """
    r = _regions(inputs)
    suffix_delta = inputs.delta_pos if cfg.suffix_skill == "positive" else inputs.delta_neg
    out = {}
    for key, region, delta in (
        ("opd/delta_prefix", r.prefix, inputs.delta_pos),
        ("opd/delta_error", r.error, inputs.delta_neg),
        ("opd/delta_suffix", r.suffix, suffix_delta),
    ):
        if delta is not None and bool(region.any()):
            out[key] = masked_mean(delta, region).item()
    return out


def rlsd_decay(step: int, decay_steps: int) -> float:
    """RLSD's linear schedule: 1 at step 0, 0 from ``decay_steps`` on."""
    return max(0.0, 1.0 - step / decay_steps)


@register_credit("rlsd")
def rlsd_credit(
    inputs: CreditInputs, cfg: AlgoConfig, adv: Tensor
) -> tuple[Tensor, dict[str, float]]:
    """RLSD (Yang et al. 2026a; SEED review baselines): the teacher gap sets the magnitude,
    the verifier the sign.

    c = decay(step) * clip(sign(A) * Delta_priv, -b, b),  A' = A * exp(c),
    with b = ``cfg.rlsd_bound`` and decay linear to 0 over ``cfg.rlsd_decay_steps``.  The
    weight exp(c) lies in [e^-b, e^b] and is positive, so the sign of every token's
    advantage is kept and tied groups (A = 0) stay at 0; tokens the privileged teacher
    endorses get larger credit in successes, and tokens it disfavours larger blame in
    failures.  At decay 0 this is GRPO.
    """
    decay = rlsd_decay(inputs.step, cfg.rlsd_decay_steps)
    delta = _on(inputs.valid, inputs.need("delta_priv", "rlsd"))
    coef = decay * torch.clamp(torch.sign(adv) * delta, -cfg.rlsd_bound, cfg.rlsd_bound)
    weight = torch.exp(coef)  # [B, T], in [e^-b, e^b]
    metrics = {"rlsd/decay": decay, "rlsd/weight_mean": masked_mean(weight, inputs.valid).item()}
    return adv * weight, metrics
