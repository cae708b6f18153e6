"""The two kernels every server rule is built from, a Gram matrix and one weighted sum, and the
rules' work in coefficient space on the K x K Gram matrix: FedFV's conflict projections (Wang et
al. IJCAI 2021) and AdaFed's loss-scaled Gram-Schmidt (Hamidi & Yang, TMLR 2024)."""

from __future__ import annotations

import torch
from torch import Tensor

TINY = 1e-30  # floor for norms and denominators: a zero-norm update stays zero, never NaN


def gram(x: Tensor) -> Tensor:
    """Gram matrix ``G_ij = <x_i, x_j>`` of the rows of ``x [K, d]``: ``[K, K]`` float64 on the CPU
    (one float64 GEMM, exact enough for the K x K problems built on it)."""
    x64 = x.to(torch.float64)
    return (x64 @ x64.T).cpu()


def combine(coef: Tensor, x: Tensor) -> Tensor:
    """``sum_k coef_k x_k``: ``coef [K]`` (any dtype / device) and ``x [K, d]`` -> ``[d]``.

    The coefficients are cast to ``x``'s dtype; where that cast would lose one (a nonzero below
    float32's smallest normal number, e.g. q-FedAvg's ``1 / sum h`` once the updates' norms pass
    ~1e19, or one beyond its largest), the sum is taken in float64 and cast back, so a tiny step
    stays a tiny step rather than a silent zero."""
    c = coef.to(dtype=x.dtype)
    if x.dtype != torch.float64 and x.is_floating_point():
        c64 = coef.to(torch.float64)
        lost = (c64 != 0) & ((c.abs() < torch.finfo(x.dtype).tiny) | ~torch.isfinite(c))
        if bool(lost.any()):
            return (c64.to(x.device) @ x.to(torch.float64)).to(x.dtype)
    return c.to(x.device) @ x


def sq_norms(x: Tensor) -> Tensor:
    """Squared norms ``[K]`` of the rows of ``x [K, d]`` (K >= 1), float64 on the CPU, one row at a
    time in float64 (a float32 norm overflows past ~1.8e19; no float64 copy of the whole ``x``)."""
    return torch.stack([torch.linalg.vector_norm(r.to(torch.float64)) ** 2 for r in x]).cpu()


def normalizer(g: Tensor) -> Tensor:
    """Factors ``s [K]`` with ``s_k x_k`` of unit norm (0 for a zero update), from the Gram matrix
    ``g [K, K]`` of ``x``: the normalised Gram matrix is ``s[:, None] * g * s[None, :]``."""
    n = g.diagonal().clamp_min(0.0).sqrt()
    return torch.where(n > 0, 1.0 / n.clamp_min(TINY), torch.zeros_like(n))


def project_conflicts(g: Tensor, order: Tensor, project: Tensor) -> Tensor:
    """FedFV's internal step in coefficient space: ``C [K, K]`` with ``x'_i = sum_j C_ij x_j``.

    ``g [K, K]``: Gram matrix of the updates ``x``. Every client ``project [K]`` marks, starting from
    ``x'_i = x_i``, takes for j in ``order`` (j != i): if ``<x_j, x'_i> < 0`` then
    ``x'_i -= <x_j, x'_i> / ||x_j||^2 x_j``, always against the ORIGINAL ``x_j``; the others keep
    ``x_i``. All clients advance through ``order`` together: K steps over K-vectors."""
    g = g.to(torch.float64)
    k_count = g.shape[0]
    coef = torch.eye(k_count, dtype=torch.float64)
    project = project.to(torch.bool).cpu()
    idx = torch.arange(k_count)
    for j in order.tolist():
        dots = coef @ g[:, j]                                  # <x'_i, x_j> for every i
        hit = project & (idx != j) & (dots < 0)
        coef[:, j] -= torch.where(hit, dots / g[j, j].clamp_min(TINY), torch.zeros_like(dots))
    return coef


def row_dots(rows: Tensor, x: Tensor) -> Tensor:
    """``<rows_j, x>`` for ``rows [J, d]`` (J >= 1) and ``x [d]``: ``[J]`` float64 (in float64, so
    float32 vectors with norms past ~1.8e19 do not overflow to inf)."""
    return torch.stack([r.to(torch.float64) @ x.to(torch.float64) for r in rows])


def remove_conflict(x: Tensor, s: Tensor) -> Tensor:
    """``x - <x, s> / ||s||^2 s`` if ``<x, s> < 0``, else ``x`` (``[d]``, no sync); the dot products
    in float64, which float32 norms past ~1.8e19 would overflow."""
    x64, s64 = x.to(torch.float64), s.to(torch.float64)
    dot = x64 @ s64
    coef = torch.where(dot < 0, dot / (s64 @ s64).clamp_min(TINY), torch.zeros_like(dot))
    return x - (coef * s64).to(x.dtype)


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
