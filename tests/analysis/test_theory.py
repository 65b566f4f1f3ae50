"""SEED's Propositions 1-3 in closed form, against the review's worked examples and autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.theory import (
    gate,
    gate_variance,
    kl_divergence,
    opd_logit_gradient,
    reweighted_target,
    staleness_bound,
    value_alignment_gain,
)

# the review's 4-token toy (Proposition 1 verification)
PI = [0.10, 0.35, 0.40, 0.15]
W = [0.20, 0.35, 0.85, 0.70]
Q = [0.10, 0.30, 0.90, 0.60]


def test_reweighted_target_review_example():
    z, r = reweighted_target(PI, W)
    assert round(z, 4) == 0.5875
    assert np.round(r, 3).tolist() == [0.034, 0.209, 0.579, 0.179]
    assert r.sum() == pytest.approx(1.0)
    # r / pi is increasing in w: same order [2, 3, 1, 0]
    assert (
        np.argsort(-r / np.array(PI)).tolist() == np.argsort(-np.array(W)).tolist() == [2, 3, 1, 0]
    )


def test_gate_variance_review_example_and_eq11_identity():
    var = gate_variance(PI, W)
    assert round(var, 4) == 0.0642
    grad = opd_logit_gradient(PI, W)
    assert np.sum(grad**2 / np.array(PI)) == pytest.approx(var)  # ||grad||^2_{pi^-1} = Var_pi[w]
    # signed credit: above-average gates (tokens 2, 3) get a negative gradient (pushed up)
    assert (np.sign(grad) == [1, 1, -1, -1]).all()


def test_constant_gate_gives_zero_gradient():
    assert np.allclose(opd_logit_gradient(PI, [0.6] * 4), 0.0)
    assert gate_variance(PI, [0.6] * 4) == pytest.approx(0.0)


@pytest.mark.parametrize("student", [None, [0.25, 0.25, 0.30, 0.20]])
def test_opd_logit_gradient_matches_torch_autograd(student):
    p = PI if student is None else student
    logits = torch.tensor(np.log(p), dtype=torch.float64, requires_grad=True)
    target = torch.tensor(np.array(PI) * np.array(W), dtype=torch.float64)
    loss = -(target * torch.log_softmax(logits, dim=0)).sum()  # Eq. 9
    (grad,) = torch.autograd.grad(loss, logits)
    assert np.allclose(opd_logit_gradient(PI, W, student), grad.numpy(), atol=1e-12)


def test_value_alignment_review_example():
    gain, rhs = value_alignment_gain(PI, W, Q)
    assert round(gain, 4) == 0.1290 and rhs == pytest.approx(gain)
    # a gate anti-aligned with Q makes the target worse, on both sides of Eq. 8
    bad_gain, bad_rhs = value_alignment_gain(PI, [0.85, 0.70, 0.20, 0.35], Q)
    assert bad_gain < 0 and bad_rhs == pytest.approx(bad_gain)


def test_kl_divergence():
    _, r = reweighted_target(PI, W)
    assert round(kl_divergence(r, PI), 3) == 0.100  # review's "KL-check"
    assert kl_divergence(PI, PI) == 0.0
    assert kl_divergence([0.5, 0.5, 0.0], [0.25, 0.75, 0.0]) == pytest.approx(
        0.5 * np.log(2) + 0.5 * np.log(0.5 / 0.75)
    )
    assert kl_divergence([0.5, 0.5], [1.0, 0.0]) == float("inf")


def test_staleness_review_example():
    discrepancy, bound = staleness_bound(0.80, 0.30, beta=5.0)
    assert round(float(gate(0.80, 5.0)), 4) == 0.9820 and round(float(gate(0.30, 5.0)), 4) == 0.8176
    assert round(discrepancy, 4) == 0.1644 and bound == pytest.approx(0.625)


def test_staleness_rounds_table_and_bound_holds():
    # review's multi-round table: Delta_kk = 0.3 + 0.05 k, stale Delta = 0.3
    rounds = [0, 2, 4, 6, 8, 10]
    got = [staleness_bound(0.3 + 0.05 * k, 0.3, 5.0).discrepancy for k in rounds]
    # the review subtracts gates already rounded to 4 places (0.9241 - 0.8176), hence abs=1e-4
    assert got == pytest.approx([0.0, 0.0632, 0.1065, 0.1350, 0.1531, 0.1644], abs=1e-4)
    rng = np.random.default_rng(0)
    cur, old = rng.normal(size=100), rng.normal(size=100)
    for beta in (1.0, 5.0, 20.0):
        d, b = staleness_bound(cur, old, beta)
        assert 0 < d <= b


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: reweighted_target([0.5, 0.6], [0.1, 0.2]), "probability vector"),
        (lambda: reweighted_target(PI, [0.2, 0.3, 1.5, 0.1]), r"gate values in \[0, 1\]"),
        (lambda: reweighted_target(PI, [0, 0, 0, 0]), "Z = sum pi"),
        (lambda: value_alignment_gain(PI, W, [1.0, 2.0]), "q has shape"),
        (lambda: staleness_bound([0.1, 0.2], [0.1], 5.0), "must be equal"),
    ],
)
def test_theory_rejects_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()
