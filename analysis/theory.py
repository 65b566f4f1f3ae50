"""Closed forms from SEED's theory (review of Wu et al. 2026, Appendix A), in numpy.

All functions work at one context c over a small candidate vocabulary: ``pi`` is the
current policy pi_k(. | c) (a probability vector), ``w`` the conditional expected gate
w_k(c, .) in [0, 1] (Eq. 3), ``q`` the action values Q_k(c, .).  They back the diagnostics
in ``analysis/`` (value alignment, staleness) and are checked against the review's worked
examples in ``tests/analysis/test_theory.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike


class ValueAlignment(NamedTuple):
    """Both sides of Eq. 8: E_r[Q] - E_pi[Q] (``gain``) and Cov_pi(Q, w) / Z (``cov_over_z``)."""

    gain: float
    cov_over_z: float


class StalenessBound(NamedTuple):
    """Eq. 14 per unit G: the actual mean gate discrepancy and its Lipschitz bound."""

    discrepancy: float
    bound: float


def _distribution(p: ArrayLike, name: str) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    if p.ndim != 1 or p.size == 0 or np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-8):
        raise ValueError(
            f"{name} must be a non-empty 1-D probability vector summing to 1, got {p.tolist()}"
        )
    return p


def _gates(w: ArrayLike, size: int) -> np.ndarray:
    w = np.asarray(w, dtype=float)
    if w.shape != (size,) or np.any(w < 0) or np.any(w > 1):
        raise ValueError(f"w must be {size} gate values in [0, 1], got {w.tolist()}")
    return w


def gate(delta: ArrayLike, beta: float) -> np.ndarray:
    """SEED's confidence gate sigma(beta * Delta) (Eq. 1), elementwise."""
    return 1.0 / (1.0 + np.exp(-beta * np.asarray(delta, dtype=float)))


def reweighted_target(pi: ArrayLike, w: ArrayLike) -> tuple[float, np.ndarray]:
    """Proposition 1: Z = sum_v pi(v) w(v) and r(v) = pi(v) w(v) / Z.

    Returns ``(Z, r)``; r is the skill-reweighted target distribution the OPD update
    distils toward.  Raises if Z = 0 (the gate is 0 on the whole support).
    """
    pi = _distribution(pi, "pi")
    w = _gates(w, pi.size)
    z = float(pi @ w)
    if z <= 0:
        raise ValueError("Z = sum pi * w is 0: the gate vanishes on the support of pi")
    return z, pi * w / z


def opd_logit_gradient(pi: ArrayLike, w: ArrayLike, p: ArrayLike | None = None) -> np.ndarray:
    """Eq. 10: gradient of L(z) = -sum_v pi(v) w(v) log softmax(z)(v) w.r.t. the logits z.

    dL/dz(v) = p(v) Z - pi(v) w(v), where p = softmax(z) is the student distribution;
    at theta = theta_k (``p`` omitted, p = pi) this is pi(v) [Z - w(v)].
    """
    z, _ = reweighted_target(pi, w)
    pi, w = np.asarray(pi, dtype=float), np.asarray(w, dtype=float)
    p = pi if p is None else _distribution(p, "p")
    if p.shape != pi.shape:
        raise ValueError(f"p has {p.size} entries, pi has {pi.size}")
    return p * z - pi * w


def gate_variance(pi: ArrayLike, w: ArrayLike) -> float:
    """Eq. 11: Var_{v~pi}[w(v)], which equals ||dL/dz||^2 in the pi^{-1}-weighted norm."""
    z, _ = reweighted_target(pi, w)
    pi, w = np.asarray(pi, dtype=float), np.asarray(w, dtype=float)
    return float(pi @ (w - z) ** 2)


def value_alignment_gain(pi: ArrayLike, w: ArrayLike, q: ArrayLike) -> ValueAlignment:
    """Eq. 8: E_{v~r}[Q(v)] - E_{v~pi}[Q(v)] = Cov_{v~pi}(Q, w) / Z; returns both sides."""
    z, r = reweighted_target(pi, w)
    pi, w = np.asarray(pi, dtype=float), np.asarray(w, dtype=float)
    q = np.asarray(q, dtype=float)
    if q.shape != pi.shape:
        raise ValueError(f"q has shape {q.shape}; expected {pi.shape} like pi")
    gain = float(r @ q - pi @ q)
    cov = float(pi @ ((q - pi @ q) * (w - z)))
    return ValueAlignment(gain, cov / z)


def kl_divergence(p: ArrayLike, q: ArrayLike) -> float:
    """D_KL(p || q) = sum_v p(v) log(p(v) / q(v)) in nats (0 log 0 = 0; inf if q = 0 < p)."""
    p, q = _distribution(p, "p"), _distribution(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p has {p.size} entries, q has {q.size}")
    support = p > 0
    if np.any(q[support] == 0):
        return float("inf")
    return float(np.sum(p[support] * np.log(p[support] / q[support])))


def staleness_bound(
    delta_current: ArrayLike, delta_stale: ArrayLike, beta: float
) -> StalenessBound:
    """Proposition 3, Eq. 14 (per unit gradient bound G).

    ``discrepancy`` = E|sigma(beta Delta_kk) - sigma(beta Delta_kj)| and ``bound`` =
    (beta / 4) E|Delta_kk - Delta_kj| (sigma(beta .) is beta/4-Lipschitz); the expectation
    is the mean over the given samples.  Always discrepancy <= bound.
    """
    cur, old = np.asarray(delta_current, dtype=float), np.asarray(delta_stale, dtype=float)
    if cur.shape != old.shape or cur.size == 0:
        raise ValueError(
            f"delta_current {cur.shape} and delta_stale {old.shape} must be equal, non-empty shapes"
        )
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    discrepancy = float(np.mean(np.abs(gate(cur, beta) - gate(old, beta))))
    return StalenessBound(discrepancy, float(beta / 4 * np.mean(np.abs(cur - old))))
