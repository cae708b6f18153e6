"""Projections of conflicting updates (FedFV, Wang et al. IJCAI 2021)."""

from __future__ import annotations

import torch
from torch import Tensor

from fedmoo.moo.gram import TINY


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
    """``<rows_j, x>`` for ``rows [J, d]`` and ``x [d]``: ``[J]`` float64 (taken in float64, so
    float32 vectors with norms past ~1.8e19 do not overflow to inf)."""
    return torch.stack([r.to(torch.float64) @ x.to(torch.float64) for r in rows]) if rows.shape[0] \
        else torch.zeros(0, dtype=torch.float64, device=x.device)


def remove_conflict(x: Tensor, s: Tensor) -> Tensor:
    """``x - <x, s> / ||s||^2 s`` if ``<x, s> < 0``, else ``x`` (``[d]``, no sync); the dot products
    in float64, which float32 norms past ~1.8e19 would overflow."""
    x64, s64 = x.to(torch.float64), s.to(torch.float64)
    dot = x64 @ s64
    coef = torch.where(dot < 0, dot / (s64 @ s64).clamp_min(TINY), torch.zeros_like(dot))
    return x - (coef * s64).to(x.dtype)
