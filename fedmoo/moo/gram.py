"""The two kernels every server rule is built from: a Gram matrix and one weighted sum."""

from __future__ import annotations

import torch
from torch import Tensor

TINY = 1e-30  # floor for norms and denominators: a zero-norm update stays zero, never NaN


def gram(x: Tensor) -> Tensor:
    """Gram matrix ``G_ij = <x_i, x_j>`` of the rows of ``x [K, d]``: ``[K, K]`` float64 on the CPU.

    Computed in float64 (one GEMM) so that the K x K problems built on it (QPs, Gram-Schmidt,
    projections) see exact-enough inner products.
    """
    x64 = x.to(torch.float64)
    return (x64 @ x64.T).cpu()


def combine(coef: Tensor, x: Tensor) -> Tensor:
    """``sum_k coef_k x_k``: ``coef [K]`` (any dtype / device) and ``x [K, d]`` -> ``[d]``."""
    return coef.to(dtype=x.dtype, device=x.device) @ x


def row_norms(g: Tensor) -> Tensor:
    """Euclidean norms ``[K]`` of the rows from a Gram matrix ``g [K, K]`` (``sqrt(diag)``)."""
    return g.diagonal().clamp_min(0.0).sqrt()


def normalizer(g: Tensor) -> Tensor:
    """Factors ``s [K]`` with ``s_k x_k`` of unit norm, and ``s_k = 0`` for a zero update.

    ``g`` is the Gram matrix ``[K, K]`` of ``x``. The normalised Gram matrix is
    ``s[:, None] * g * s[None, :]`` (no second pass over ``x``).
    """
    n = row_norms(g)
    return torch.where(n > 0, 1.0 / n.clamp_min(TINY), torch.zeros_like(n))
