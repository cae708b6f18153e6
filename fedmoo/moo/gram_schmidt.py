"""AdaFed's loss-scaled Gram-Schmidt (Hamidi & Yang, TMLR 2024), done in coefficient space."""

from __future__ import annotations

import torch
from torch import Tensor

# A client whose Gram-Schmidt residual is below this fraction of its own norm is taken as
# already spanned by the earlier clients and left out of the basis. Residual norms come from
# r^T G r, which resolves relative norms only down to ~sqrt(float64 eps) ~ 1e-8, so the cut is
# put two orders of magnitude above that noise (see docs/algorithms.md, AdaFed).
DEPENDENT_TOL = 1e-6


def adafed_coefficients(g: Tensor, fg: Tensor, tol: float = DEPENDENT_TOL) -> tuple[Tensor, Tensor]:
    """Coefficients ``a [K]`` with AdaFed's direction ``d = sum_k a_k x_k``, and the basis mask.

    ``g [K, K]``: Gram matrix of the updates ``x_k``; ``fg [K]``: ``f_k^gamma > 0``. AdaFed builds,
    in cohort order, ``x~_1 = x_1 / fg_1`` and
    ``x~_k = (x_k - sum_{i<k} c_ki x~_i) / (fg_k - sum_{i<k} c_ki)`` with
    ``c_ki = <x_k, x~_i> / ||x~_i||^2``, then ``d = sum_k lam_k x~_k``, ``lam_k`` proportional to
    ``1 / ||x~_k||^2``, so that ``<x_k, d> = ||d||^2 fg_k``. With the plain Gram-Schmidt residual
    ``r_k = den_k x~_k`` this is ``d = (sum_k den_k r_k / ||r_k||^2) / (sum_k den_k^2 / ||r_k||^2)``,
    which never divides by a ``den_k`` that may be ~0. Residuals are rows of a triangular K x K
    coefficient matrix, orthogonalised twice through ``g``: no pass over the d-dimensional updates.

    A client whose residual norm is below ``tol * ||x_k||`` (zero, duplicate or collinear updates)
    is left out of the basis; all clients out gives a = 0."""
    g = g.to(torch.float64)
    fg = fg.to(torch.float64).cpu()
    k_count = g.shape[0]
    eye = torch.eye(k_count, dtype=torch.float64)
    res = torch.zeros(k_count, k_count, dtype=torch.float64)   # row k: r_k = res[k] @ x
    norm2 = torch.ones(k_count, dtype=torch.float64)           # ||r_k||^2 (1 for unused rows)
    den = torch.zeros(k_count, dtype=torch.float64)
    in_basis = torch.zeros(k_count, dtype=torch.bool)
    diag = g.diagonal()
    for k in range(k_count):
        r = eye[k].clone()
        c_total = torch.zeros(k_count, dtype=torch.float64)   # projection coefficients on r_i
        for _ in range(2):
            c = (res @ (g @ r)) / norm2 * in_basis
            r = r - c @ res
            c_total += c
        n2 = r @ g @ r
        if not bool(n2 > (tol * tol) * diag[k]) or not bool(diag[k] > 0):
            continue
        res[k], norm2[k], in_basis[k] = r, n2, True
        den[k] = fg[k] - (c_total * den).sum()
    if not bool(in_basis.any()):
        return torch.zeros(k_count, dtype=torch.float64), in_basis
    weight = torch.where(in_basis, den / norm2, torch.zeros_like(den))
    return (weight @ res) / (weight * den).sum(), in_basis
