"""AdaFed's Gram-Schmidt in coefficient space: toy numbers, the f^gamma property, order, degeneracy."""

from __future__ import annotations

import itertools
import math

import torch

from fedmoo.moo.gram import adafed_coefficients


def direction(x, f):
    x = torch.as_tensor(x, dtype=torch.float64)
    a, basis = adafed_coefficients(x @ x.T, torch.as_tensor(f, dtype=torch.float64))
    return a @ x, basis


def test_toy_numbers_of_the_spec():
    # Prepare: g1=(1,0), g2=(1,1)/sqrt2, f=(1,2), gamma=1
    s = 1 / math.sqrt(2)
    # Execute
    d, basis = direction([[1.0, 0.0], [s, s]], [1.0, 2.0])
    # Assert: d = (0.230248, 0.420991) and G d = ||d||^2 f = (0.230248, 0.460496)
    torch.testing.assert_close(d, torch.tensor([0.230248, 0.420991], dtype=torch.float64),
                               atol=1e-6, rtol=0)
    assert basis.tolist() == [True, True]


def test_directional_derivatives_proportional_to_f_and_order_invariant():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    f = torch.tensor([0.7, 1.9, 1.2, 0.4], dtype=torch.float64)
    d, _ = direction(x, f)
    torch.testing.assert_close(x @ d, (d @ d) * f, atol=1e-12, rtol=0)
    for perm in itertools.permutations(range(4)):
        p = list(perm)
        torch.testing.assert_close(direction(x[p], f[p])[0], d, atol=1e-12, rtol=0)


def test_spanned_updates_leave_the_basis_and_nothing_is_nan():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, generator=gen, dtype=torch.float64)   # K > d
    x[2] = x[0]                                                  # duplicate
    x[4] = 0.0                                                   # zero update
    f = torch.linspace(0.5, 2.0, 7, dtype=torch.float64)
    d, basis = direction(x, f)
    assert basis.tolist() == [True, True, False, True, False, False, False]
    assert bool(torch.isfinite(d).all())
    kept = basis.nonzero().flatten()
    torch.testing.assert_close(x[kept] @ d, (d @ d) * f[kept], atol=1e-10, rtol=0)


def test_all_zero_updates_give_zero_direction():
    d, basis = direction(torch.zeros(3, 4), [1.0, 2.0, 3.0])
    assert not bool(basis.any()) and bool((d == 0).all())
