"""Euclidean projection onto the simplex: the known off-by-one case, brute force, properties."""

from __future__ import annotations

import itertools

import pytest
import torch

from fedmoo.moo.minnorm import project_simplex


def brute_force_projection(v: torch.Tensor) -> torch.Tensor:
    """Try every support S: x_S = v_S + (1 - sum v_S)/|S|, zero elsewhere; keep the nearest
    feasible one (the projection is the unique minimiser over these candidates)."""
    n, best, best_dist = v.numel(), None, float("inf")
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            s = list(support)
            x = torch.zeros_like(v)
            x[s] = v[s] + (1 - v[s].sum()) / size
            if bool((x >= -1e-12).all()):
                dist = float(((x - v) ** 2).sum())
                if dist < best_dist:
                    best, best_dist = x, dist
    return best


def test_off_by_one_case_of_reference_code_is_correct():
    # Prepare: the input that the fair_flearn / watml projection maps to (1.05, 0)
    v = torch.tensor([1.25, 0.15], dtype=torch.float64)
    # Execute
    x = project_simplex(v)
    # Assert
    assert x.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("seed", range(8))
def test_matches_brute_force_and_lies_on_simplex(seed):
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(5, generator=gen, dtype=torch.float64) * 2
    x = project_simplex(v)
    assert bool((x >= 0).all()) and abs(float(x.sum()) - 1) < 1e-12
    torch.testing.assert_close(x, brute_force_projection(v), atol=1e-12, rtol=0)


def test_points_on_simplex_are_fixed_and_shift_is_ignored():
    p = torch.tensor([0.2, 0.0, 0.5, 0.3], dtype=torch.float64)
    torch.testing.assert_close(project_simplex(p), p, atol=1e-15, rtol=0)
    v = torch.tensor([3.0, -1.0, 2.5], dtype=torch.float64)
    torch.testing.assert_close(project_simplex(v + 7.0), project_simplex(v), atol=1e-12, rtol=0)
    assert project_simplex(torch.tensor([-5.0])).tolist() == [1.0]


def test_rejects_non_vectors():
    with pytest.raises(ValueError, match="non-empty vector"):
        project_simplex(torch.zeros(2, 2))
