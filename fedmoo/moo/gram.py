"""The two kernels every server rule is built from: a Gram matrix and one weighted sum."""

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
    """Squared norms ``[K]`` of the rows of ``x [K, d]``, float64 on the CPU, taken one row at a time
    in float64 (a float32 norm overflows past ~1.8e19; no float64 copy of the whole ``x``)."""
    return torch.stack([torch.linalg.vector_norm(r.to(torch.float64)) ** 2 for r in x]).cpu() \
        if x.shape[0] else torch.zeros(0, dtype=torch.float64)


def normalizer(g: Tensor) -> Tensor:
    """Factors ``s [K]`` with ``s_k x_k`` of unit norm (0 for a zero update), from the Gram matrix
    ``g [K, K]`` of ``x``: the normalised Gram matrix is ``s[:, None] * g * s[None, :]``."""
    n = g.diagonal().clamp_min(0.0).sqrt()
    return torch.where(n > 0, 1.0 / n.clamp_min(TINY), torch.zeros_like(n))
