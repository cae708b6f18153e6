"""Stacked client parameters: one contiguous ``[R, ...]`` tensor per parameter tensor ("slots"),
every ``nn.Linear`` weight stored transposed (``[in, out]``; the model sees an ``[out, in]``
view): each batched kernel reads one dense operand, and on the CPU ``torch.bmm`` takes a much
slower path with a transposed batched operand (docs/PERFORMANCE.md). ``pack`` / ``unpack`` /
``deltas`` convert between the flat ``[R, d]`` layout (fedmoo.params) and the slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Slot:
    name: str                 # key for functional_call
    shape: tuple[int, ...]    # the parameter's own shape
    offset: int               # start in the flat vector
    numel: int
    transposed: bool          # stored as shape[::-1]

    @property
    def stored(self) -> tuple[int, ...]:
        return self.shape[::-1] if self.transposed else self.shape

    def own(self, t: Tensor) -> Tensor:
        """A stored-layout tensor (``[..., *stored]``) as a view in the parameter's own shape;
        also maps the parameter's own layout to the stored one (a transpose is its own inverse)."""
        return t.transpose(-1, -2) if self.transposed else t


class ParamLayout:
    def __init__(self, model: nn.Module):
        linear_weights = {f"{m_name}.weight" if m_name else "weight"
                          for m_name, m in model.named_modules() if isinstance(m, nn.Linear)}
        slots, off = [], 0
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            n = p.numel()
            slots.append(Slot(name, tuple(p.shape), off, n, name in linear_weights and p.dim() == 2))
            off += n
        self.slots: list[Slot] = slots
        self.dim = off

    def empty(self, rows: int, like: Tensor) -> list[Tensor]:
        """Uninitialised slots ``[rows, *stored]`` with the dtype and device of ``like``."""
        return [like.new_empty(rows, *s.stored) for s in self.slots]

    def params(self, slots: list[Tensor]) -> dict[str, Tensor]:
        """The ``functional_call`` argument: the slots in the parameters' own shapes."""
        return {s.name: s.own(v) for s, v in zip(self.slots, slots)}

    def _segments(self, flat: Tensor, rows: int):
        """``(slot, segment [rows, *shape] of flat)``; a ``[d]`` flat is broadcast to every row."""
        flat = flat.expand(rows, self.dim) if flat.dim() == 1 else flat
        for s in self.slots:
            yield s, flat[:, s.offset : s.offset + s.numel].unflatten(1, s.shape)

    def pack(self, flat: Tensor, out: list[Tensor], rows: slice = slice(None)) -> list[Tensor]:
        """Write ``flat`` (``[d]``, broadcast to every row, or ``[r, d]``) into ``out[i][rows]``.

        A ``[d]`` vector is transposed into the first row only and then copied row to row: a
        transposing copy is several times slower than a contiguous one."""
        r = out[0][rows].shape[0] if out else 0
        first = slice(rows.start, (rows.start or 0) + 1) if flat.dim() == 1 else rows
        for (s, seg), v in zip(self._segments(flat, 1 if flat.dim() == 1 else r), out):
            v[first].copy_(s.own(seg))
            if flat.dim() == 1 and r > 1:
                v[rows][1:].copy_(v[first].expand(r - 1, *s.stored))
        return out

    def unpack(self, slots: list[Tensor], rows: slice = slice(None)) -> Tensor:
        """Rows ``rows`` of the slots in the flat contract layout (a new ``[r, d]`` tensor)."""
        r = slots[0][rows].shape[0]
        out = slots[0].new_empty(r, self.dim)
        for (s, seg), v in zip(self._segments(out, r), slots):
            seg.copy_(s.own(v[rows]))
        return out

    def deltas(self, w: Tensor, slots: list[Tensor], rows: slice = slice(None)) -> Tensor:
        """``w - row`` for rows ``rows`` of the slots, ``[r, d]``, in one pass per slot."""
        r = slots[0][rows].shape[0]
        out = slots[0].new_empty(r, self.dim)
        for (s, seg), (_, ws), v in zip(self._segments(out, r), self._segments(w, r), slots):
            torch.sub(ws, s.own(v[rows]), out=seg)
        return out
