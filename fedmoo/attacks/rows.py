"""Row-wise edits of a cohort's updates ``[K, ...]`` (shared by the update attacks)."""

from __future__ import annotations

from torch import Tensor


def row_view(rows: Tensor, like: Tensor) -> Tensor:
    """``rows [K]`` reshaped to broadcast over ``like [K, ...]``."""
    return rows.view(-1, *(1,) * (like.dim() - 1))


def scale_rows(deltas: Tensor, rows: Tensor, factor: float) -> Tensor:
    """A copy of ``deltas`` with the rows where ``rows`` is true multiplied by ``factor``."""
    out = deltas.clone()
    out[rows] = deltas[rows] * factor
    return out
