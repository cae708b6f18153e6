"""Common-descent diagnostics: does the server's move descend for every client's update?

A server direction ``d`` (descent sign: ``w_{t+1} = w_t - d``) is a common descent direction for
the cohort when ``<g_k, d> > 0`` for every client update ``g_k``. The cosines below say how far a
rule is from that: a client with ``cos(g_k, d) < 0`` is moved against its own update (harmed).
"""

from __future__ import annotations

import torch
from torch import Tensor

# A cosine below -HARM_TOL counts as harm. Rules that project an update off d (FedFV) or leave
# d orthogonal to a client make cosines that are 0 in exact arithmetic and +-1e-16 (float64) or
# +-1e-7 (float32 updates) after rounding; those are not harm.
HARM_TOL = 1e-6
# A move shorter than ZERO_REL * max_k ||x_k|| is a zero move: at a Pareto-stationary cohort the
# min-norm point is 0 in exact arithmetic, and what a solver and a weighted sum leave is rounding
# (1e-16 to 1e-11 seen on FedMGDA+ at epsilon = 1) whose direction is noise. Float32 updates
# round at ~1e-7 of their norm, so their level is 64 float32 epsilons (7.6e-6).
ZERO_REL = {torch.float64: 1e-8, torch.float32: 64 * torch.finfo(torch.float32).eps}
# Rows of updates converted to float64 at once (32 MB).
BLOCK_ELEMENTS = 2**22


def _per_row(x: Tensor, only: Tensor | None, fn) -> Tensor:
    """``fn(rows)`` ``[R]`` float64 for the rows of ``x`` (all, or those ``only [R]`` marks; 0 for
    the others), on ``x``'s device: the rows go to ``fn`` in float64 blocks of at most
    BLOCK_ELEMENTS, never a float64 copy of a large cohort."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.zeros(rows.shape[0], dtype=torch.float64, device=x.device)
    picked = (torch.arange(rows.shape[0], device=x.device) if only is None
              else only.reshape(-1).to(x.device).nonzero().flatten())
    for b in picked.split(max(1, BLOCK_ELEMENTS // max(1, rows.shape[1]))):
        out[b] = fn(rows.index_select(0, b).to(torch.float64))
    return out


def row_norms(x: Tensor, only: Tensor | None = None) -> Tensor:
    """``||x_r||`` in float64 for every row of ``x [R, d]`` (or ``[K, S, d]``), on ``x``'s device;
    0 for the rows ``only [R]`` (bool) leaves out."""
    return _per_row(x, only, lambda r: torch.linalg.vector_norm(r, dim=1))


def descent_cosines(x: Tensor, d: Tensor, only: Tensor | None = None,
                    norms: Tensor | None = None) -> Tensor:
    """``cos_k = <x_k, d> / (||x_k|| ||d||)`` for every row of ``x [K, d]`` (``[K, S, d]`` gives
    ``[K * S]``, row-major), ``[R]`` float64 on the CPU; 0 where ``x_k`` or ``d`` is zero and for
    the rows ``only [R]`` (bool) leaves out. ``norms``: the rows' ``row_norms`` when the caller has
    them. Taken in float64 a block of rows at a time, so float32 norms past ~1.8e19 stay finite."""
    d64 = d.reshape(-1).to(torch.float64)
    dots = _per_row(x, only, lambda r: r @ d64)
    norms = row_norms(x, only) if norms is None else norms
    denom = (norms.to(dots.device) * torch.linalg.vector_norm(d64)).cpu()
    dots = dots.cpu()
    cos = torch.where(denom > 0, dots / denom.clamp_min(torch.finfo(torch.float64).tiny),
                      torch.zeros_like(dots))
    return cos.clamp(-1.0, 1.0)


def noise_level(x: Tensor, held: Tensor, norms: Tensor | None = None) -> float:
    """Length below which a combination of the rows of ``x [R, d]`` is rounding, not a move:
    ``ZERO_REL[dtype] * max ||x_r||`` over the rows ``held [R]`` marks."""
    if not bool(held.any()):
        return 0.0
    norms = row_norms(x, held) if norms is None else norms
    return ZERO_REL.get(x.dtype, 64 * torch.finfo(x.dtype).eps) * float(norms.max())


def update_norms(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, float]:
    """The updates' ``row_norms`` over the rows a per-task ``mask`` holds, and their
    ``noise_level``: what ``common_descent`` and ``move_norm`` take, computed once."""
    held = _held(x, mask)
    norms = row_norms(x, held)
    return norms, noise_level(x, held, norms)


def _held(x: Tensor, mask: Tensor | None) -> Tensor:
    """``[K, S]`` bool: the rows of ``x`` that count (all of them unless a per-task mask)."""
    k = x.shape[0]
    s = x.shape[1] if x.dim() == 3 else 1
    if mask is None or x.dim() != 3:
        return torch.ones(k, s, dtype=torch.bool)
    return mask.to(torch.bool).cpu().reshape(k, s)


def move_norm(x: Tensor, d: Tensor, mask: Tensor | None = None,
              noise: float | None = None) -> float:
    """``||d||`` in float64, exactly 0 when no longer than the rounding level of the updates ``x``
    (``noise``, when the caller has it): rounding, not a move."""
    d_norm = float(torch.linalg.vector_norm(d, dtype=torch.float64))
    return 0.0 if d_norm <= (noise_level(x, _held(x, mask)) if noise is None else noise) \
        else d_norm


def common_descent(x: Tensor, d: Tensor, mask: Tensor | None = None,
                   noise: float | None = None, norms: Tensor | None = None) -> tuple[float, int]:
    """``(min_cos, harmed)`` of the server direction ``d [d]`` against the updates ``x``.

    ``x [K, d]``: the smallest cosine between an update and ``d``, and the number of clients with
    a cosine below ``-HARM_TOL``. ``x [K, S, d]`` (per-task updates): over the (client, task) rows
    that ``mask [K, S]`` marks held; ``harmed`` counts clients with at least one harmed task. No
    rows, or a ``d`` no longer than the updates' rounding level (``noise_level``), gives
    ``(0.0, 0)``; a cosine only counts as harm below ``-max(HARM_TOL, noise / ||d||)``, the most
    rounding can tilt it. ``noise``, ``norms``: the updates' ``update_norms`` when the caller has
    them."""
    held = _held(x, mask)
    k, s = held.shape
    if not bool(held.any()):
        return 0.0, 0
    noise = noise_level(x, held) if noise is None else noise
    d_norm = float(torch.linalg.vector_norm(d.to(torch.float64)))
    if d_norm <= noise:
        return 0.0, 0
    cos = descent_cosines(x, d, held, norms).view(k, s)
    min_cos = float(cos[held].min())
    harmed = int(((cos < -max(HARM_TOL, noise / d_norm)) & held).any(1).sum())
    return min_cos, harmed
