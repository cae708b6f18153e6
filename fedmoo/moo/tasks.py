"""Task-wise averaging and the S-task min-norm direction of FMGDA / FSMGDA (Yang et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

from fedmoo.moo.gram import gram
from fedmoo.moo.minnorm import MinNormResult, min_norm_weights


def task_average(deltas: Tensor, mask: Tensor, weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-task average ``means [S, d]`` of the clients' task updates ``deltas [K, S, d]`` over the
    clients holding each task (``mask [K, S]``), weighted by ``weights [K]`` (default uniform: the
    paper's ``1 / |R_s|``), and ``present [S]``; a task no client holds gets a zero row."""
    m = mask.to(deltas.dtype)
    if weights is not None:
        m = m * weights.to(device=deltas.device, dtype=deltas.dtype)[:, None]
    total = m.sum(0)
    present = total > 0
    coef = torch.where(present, m / total.clamp_min(torch.finfo(deltas.dtype).tiny), 0.0)
    return torch.einsum("ks,ksd->sd", coef, deltas), present


def min_norm_tasks(means: Tensor, present: Tensor, coords: Tensor | None = None,
                   solver: str = "daqp") -> tuple[Tensor, MinNormResult | None]:
    """Simplex weights ``lam [S]`` (float64, CPU) of the min-norm point of ``conv{means[s]}`` over
    the present tasks, measured on ``coords [d]`` (default every coordinate), with the FedMGDA QP
    solver; absent tasks get weight 0, and no present task gives ``lam = 0`` without a QP."""
    s = means.shape[0]
    lam = torch.zeros(s, dtype=torch.float64)
    idx = present.nonzero().flatten().cpu()
    if idx.numel() == 0:
        return lam, None
    sub = means[idx.to(means.device)]
    if coords is not None:
        sub = sub[:, coords]
    sol = min_norm_weights(gram(sub), eps=1.0, solver=solver)
    lam[idx] = sol.lam
    return lam, sol
