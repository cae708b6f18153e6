"""Problems on the probability simplex. The min-norm point of the convex hull of K vectors from
their Gram matrix: FedMGDA+'s box-constrained simplex QP ``min 1/2 lam^T G lam, sum lam = 1,
lo <= lam <= hi`` (MGDA / FMGDA: no box), in float64 through qpsolvers; a bounded Frank-Wolfe
solve takes over when the solver fails or answers an infeasible point, so a round never crashes.
Its S-task form over per-task averages (FMGDA / FSMGDA, Yang et al. 2023), and the Euclidean
projection onto the simplex (AFL; Wang & Carreira-Perpinan, 2013)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedmoo.moo.gram import gram

FEAS_TOL = 1e-6


@dataclass
class MinNormResult:
    """``lam [K]`` float64 and how it was found: ``"fixed"`` (lo = hi), ``"qp"`` or ``"fallback"``."""

    lam: Tensor
    method: str


def box_bounds(lam0: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """FedMGDA+'s box ``max(0, lam0 - eps) <= lam <= min(1, lam0 + eps)``: ``lam0 [K]`` -> two ``[K]``."""
    return (lam0 - eps).clamp_min(0.0), (lam0 + eps).clamp_max(1.0)


def frank_wolfe_min_norm(g: Tensor, lo: Tensor | None = None, hi: Tensor | None = None,
                         start: Tensor | None = None) -> Tensor:
    """Pairwise Frank-Wolfe for ``min 1/2 lam^T g lam`` over ``{lo <= lam <= hi, sum lam = 1}``.

    ``lo`` / ``hi [K]`` default to 0 / 1 (the plain simplex), ``start [K]`` to uniform (clipped into
    the box). Each iteration moves mass from the coordinate of largest gradient that can still
    decrease to the one of smallest gradient that can still increase, with exact line search, until
    that gap (zero exactly at a KKT point) is below ``1e-10 trace(g) / K`` or after 20000
    iterations. Returns ``lam [K]`` float64 on the CPU."""
    gm = g.detach().to(torch.float64).cpu().numpy()
    k = gm.shape[0]
    lo_n = np.zeros(k) if lo is None else lo.detach().to(torch.float64).cpu().numpy()
    hi_n = np.ones(k) if hi is None else hi.detach().to(torch.float64).cpu().numpy()
    lam = np.full(k, 1.0 / k) if start is None else start.detach().to(torch.float64).cpu().numpy()
    lam = np.clip(lam, lo_n, hi_n)
    grad = gm @ lam
    stop = 1e-10 * max(np.trace(gm) / k, 1e-300)
    for _ in range(20000):
        i = int(np.argmin(np.where(lam < hi_n, grad, np.inf)))
        j = int(np.argmax(np.where(lam > lo_n, grad, -np.inf)))
        gap = grad[j] - grad[i]
        if not gap > stop:
            break
        room = min(hi_n[i] - lam[i], lam[j] - lo_n[j])
        curv = gm[i, i] + gm[j, j] - 2.0 * gm[i, j]
        delta = room if curv <= 0 else min(room, gap / curv)
        lam[i] += delta
        lam[j] -= delta
        grad += delta * (gm[:, i] - gm[:, j])
    return torch.from_numpy(lam)


def min_norm_weights(g: Tensor, lam0: Tensor | None = None, eps: float = 1.0,
                     solver: str = "daqp") -> MinNormResult:
    """Weights ``lam [K]`` of the min-norm point of ``conv{x_k}`` inside FedMGDA+'s box.

    ``g [K, K]``: Gram matrix of the K vectors; ``lam0 [K]``: centre of the box (default uniform);
    ``eps`` in [0, 1]: box half-width (0 returns ``lam0``, 1 is unconstrained MGDA). A relative ridge
    makes the problem strictly convex, and the matrix is scaled by its mean diagonal (the argmin does
    not change) so the solver's absolute tolerances fit any update size."""
    g = g.detach().to(torch.float64).cpu()
    k = g.shape[0]
    lam0 = (torch.full((k,), 1.0 / k, dtype=torch.float64) if lam0 is None
            else lam0.detach().to(torch.float64).cpu())
    lo, hi = box_bounds(lam0, eps)
    if k == 1 or bool((hi - lo).max() <= 0):
        return MinNormResult(lam0.clone(), "fixed")
    mean_sq = float(g.trace()) / k       # the ridge: 1e-12 of the mean diagonal (1e-12 if g = 0)
    p = g + 1e-12 * (mean_sq if mean_sq > 0 else 1.0) * torch.eye(k, dtype=torch.float64)
    p = p / (p.trace() / k)
    lam = _solve_qp(p.numpy(), lo.numpy(), hi.numpy(), solver)
    if lam is not None:
        return MinNormResult(torch.from_numpy(lam), "qp")
    return MinNormResult(frank_wolfe_min_norm(p, lo, hi, start=lam0), "fallback")


def _solve_qp(p: np.ndarray, lo: np.ndarray, hi: np.ndarray, solver: str) -> np.ndarray | None:
    """One qpsolvers call; None when the solver fails or its answer is not feasible."""
    import qpsolvers  # here, not at the top: importing it costs every run ~0.3 s of start-up

    k = p.shape[0]
    try:
        x = qpsolvers.solve_qp(p, np.zeros(k), A=np.ones((1, k)), b=np.ones(1), lb=lo, ub=hi,
                               solver=solver)
    except Exception:  # noqa: BLE001 - any solver failure (not PD, internal error) -> fallback
        return None
    if x is None or not np.all(np.isfinite(x)):
        return None
    if abs(x.sum() - 1.0) > FEAS_TOL or np.any(x < lo - FEAS_TOL) or np.any(x > hi + FEAS_TOL):
        return None
    return np.clip(x, lo, hi)


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
