"""The box-constrained simplex QP: hand-solved cases, KKT conditions, degenerate inputs, fallback."""

from __future__ import annotations

import numpy as np
import pytest
import qpsolvers
import torch

from fedmoo.config.hparams.algo import SOLVERS  # every backend a config may name
from fedmoo.moo.minnorm import box_bounds, frank_wolfe_min_norm, min_norm_weights


def gram_of(x):
    x = torch.as_tensor(x, dtype=torch.float64)
    return x @ x.T


def assert_kkt(g, lam, lo, hi, tol=1e-7):
    """Stationarity of 1/2 lam^T g lam on {lo <= lam <= hi, sum = 1}: one multiplier nu with
    grad_k = nu on free coordinates, >= nu at the lower bound, <= nu at the upper bound."""
    grad = g @ lam
    scale = float(g.diagonal().mean()) + 1e-30
    assert abs(float(lam.sum()) - 1) < 1e-9
    assert bool((lam >= lo - 1e-9).all()) and bool((lam <= hi + 1e-9).all())
    at_lo, at_hi = lam <= lo + 1e-7, lam >= hi - 1e-7
    free = ~at_lo & ~at_hi
    nu = float(grad[free].mean()) if bool(free.any()) else float(grad @ lam)
    assert bool(((grad[free] - nu).abs() <= tol * scale).all())
    assert bool((grad[at_lo & ~at_hi] >= nu - tol * scale).all())
    assert bool((grad[at_hi & ~at_lo] <= nu + tol * scale).all())


@pytest.mark.parametrize("solver", SOLVERS)
def test_hand_solved_two_vectors(solver):
    # Prepare: g1=(1,0), g2=(0,2): min lam1^2 + 4 lam2^2 on the simplex -> (4/5, 1/5)
    g = gram_of([[1.0, 0.0], [0.0, 2.0]])
    # Execute
    res = min_norm_weights(g, solver=solver)
    # Assert: d = (0.8, 0.4) and <g_k, d> = ||d||^2 = 0.8 for both
    assert res.method == "qp"
    torch.testing.assert_close(res.lam, torch.tensor([0.8, 0.2], dtype=torch.float64), atol=1e-9, rtol=0)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("eps", [1.0, 0.5, 0.1, 0.05])
def test_kkt_conditions_hold(solver, eps):
    gen = torch.Generator().manual_seed(3)
    g = gram_of(torch.randn(7, 12, generator=gen, dtype=torch.float64) + 0.3)
    lam0 = torch.softmax(torch.randn(7, generator=gen, dtype=torch.float64), 0)
    res = min_norm_weights(g, lam0, eps, solver)
    lo, hi = box_bounds(lam0, eps)
    assert res.method == "qp"
    assert_kkt(g, res.lam, lo, hi)


def test_epsilon_zero_returns_lambda0_exactly():
    lam0 = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    res = min_norm_weights(gram_of(torch.eye(3)), lam0, 0.0)
    assert res.method == "fixed" and torch.equal(res.lam, lam0)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("case", ["zeros", "duplicates", "k_larger_than_d", "tiny_scale"])
def test_degenerate_gram_matrices_give_feasible_finite_weights(solver, case):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    if case == "zeros":
        x = torch.zeros(4, 5, dtype=torch.float64)
    elif case == "duplicates":
        x = torch.cat([x[:2], x[:2], x[:2]])
    elif case == "tiny_scale":
        x = x * 1e-9
    g = gram_of(x)
    res = min_norm_weights(g, solver=solver)
    assert bool(torch.isfinite(res.lam).all())
    assert_kkt(g / g.diagonal().mean().clamp_min(1e-300), res.lam, torch.zeros(len(g)),
               torch.ones(len(g)), tol=1e-6)


@pytest.mark.parametrize("failure", ["raises", "none", "infeasible"])
def test_solver_failure_falls_back_to_frank_wolfe(monkeypatch, failure):
    gen = torch.Generator().manual_seed(1)
    g = gram_of(torch.randn(5, 8, generator=gen, dtype=torch.float64))
    expected = min_norm_weights(g).lam

    def broken(*args, **kwargs):
        if failure == "raises":
            raise ValueError("matrix G is not positive definite")
        return None if failure == "none" else np.full(5, 0.5)

    monkeypatch.setattr(qpsolvers, "solve_qp", broken)
    res = min_norm_weights(g)
    assert res.method == "fallback"
    torch.testing.assert_close(res.lam, expected, atol=1e-6, rtol=0)


def test_frank_wolfe_matches_the_qp_on_the_simplex_and_in_a_box():
    gen = torch.Generator().manual_seed(2)
    g = gram_of(torch.randn(6, 4, generator=gen, dtype=torch.float64) + 0.5)
    qp = min_norm_weights(g).lam
    fw = frank_wolfe_min_norm(g)
    assert abs(float(fw @ g @ fw) - float(qp @ g @ qp)) < 1e-9 * float(g.trace())
    lam0 = torch.full((6,), 1 / 6, dtype=torch.float64)
    lo, hi = box_bounds(lam0, 0.05)
    fw_box = frank_wolfe_min_norm(g, lo, hi, start=lam0)
    assert_kkt(g, fw_box, lo, hi)
