"""Euclidean projection onto the probability simplex (Wang & Carreira-Perpinan, 2013)."""

from __future__ import annotations

import torch
from torch import Tensor


def project_simplex(v: Tensor) -> Tensor:
    """``argmin_{x >= 0, sum x = 1} ||x - v||`` for ``v [n]``, without host synchronisation.

    Sort ``u`` descending; ``rho = max{j : u_j + (1 - sum_{i<=j} u_i) / j > 0}`` (the sum INCLUDES
    ``u_j``; fair_flearn / watml exclude it, mapping (1.25, 0.15) to (1.05, 0) instead of (1, 0));
    ``theta = (1 - sum_{i<=rho} u_i) / rho``; ``x = max(v + theta, 0)``."""
    if v.dim() != 1 or v.numel() == 0:
        raise ValueError(f"project_simplex needs a non-empty vector, got shape {tuple(v.shape)}")
    u = v.sort(descending=True).values
    excess = u.cumsum(0) - 1.0                                   # sum_{i<=j} u_i - 1
    j = torch.arange(1, v.numel() + 1, dtype=v.dtype, device=v.device)
    rho = torch.where(u - excess / j > 0, j, torch.zeros_like(j)).max()   # >= 1 always
    theta = excess.gather(0, (rho - 1).long().view(1)) / rho
    return (v - theta).clamp_min(0.0)
