"""Stacked client parameters: one flat ``[R, d]`` tensor with a view per parameter tensor.

The global model travels as a flat ``[d]`` vector in ``named_parameters()`` order (fedmoo.params).
The batched engine keeps R client copies in one ``[R, d]`` block. Inside the block, the weight of
every ``nn.Linear`` is stored transposed (``[in, out]`` instead of ``[out, in]``): the model still
sees an ``[out, in]`` tensor (a transposed view), but the batched matmul that vmap emits for
``F.linear`` then reads a contiguous ``[R, in, out]`` operand. On the CPU, ``torch.bmm`` with
a transposed batched operand takes a much slower path (compare ``torch.bmm(x, w)`` and
``torch.bmm(x, w.transpose(1, 2))`` for x ``[10, 10, 3072]``); on CUDA both layouts are native.
``pack`` / ``unpack`` convert between the flat contract layout and the block layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Slot:
    name: str                 # key for functional_call
    shape: tuple[int, ...]    # the parameter's own shape
    offset: int               # start in the flat vector (same in both layouts)
    numel: int
    transposed: bool          # stored as shape[::-1] inside the block


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

    def _stored(self, s: Slot) -> tuple[int, ...]:
        return s.shape[::-1] if s.transposed else s.shape

    def views(self, block: Tensor) -> list[Tensor]:
        """Per-parameter views ``[R, *stored_shape]`` of a block ``[R, d]`` (no copies)."""
        r = block.shape[0]
        return [block[:, s.offset : s.offset + s.numel].view(r, *self._stored(s)) for s in self.slots]

    def params(self, views: list[Tensor]) -> dict[str, Tensor]:
        """The ``functional_call`` argument: views in the parameters' own shapes."""
        return {s.name: v.transpose(-1, -2) if s.transposed else v for s, v in zip(self.slots, views)}

    def pack(self, flat: Tensor, out: Tensor) -> Tensor:
        """Write ``flat`` (``[d]``, broadcast to every row, or ``[R, d]``) into block ``out`` ``[R, d]``."""
        rows = flat.expand(out.shape[0], self.dim) if flat.dim() == 1 else flat
        if not any(s.transposed for s in self.slots):
            return out.copy_(rows)
        for s, v in zip(self.slots, self.views(out)):
            src = rows[:, s.offset : s.offset + s.numel].unflatten(1, s.shape)
            v.copy_(src.transpose(-1, -2) if s.transposed else src)
        return out

    def unpack(self, block: Tensor) -> Tensor:
        """The block ``[R, d]`` back in the flat contract layout (a new ``[R, d]`` tensor)."""
        if not any(s.transposed for s in self.slots):
            return block.clone()
        out = torch.empty_like(block)
        for s, v in zip(self.slots, self.views(block)):
            dst = out[:, s.offset : s.offset + s.numel].view(block.shape[0], *s.shape)
            dst.copy_(v.transpose(-1, -2) if s.transposed else v)
        return out

    def numel_check(self, d: int) -> None:
        if d != self.dim:
            raise ValueError(f"flat vector has {d} entries, model has {self.dim} parameters")

