"""One SGD step of R stacked client copies, with ``torch.optim.SGD`` semantics per row.

Per row r and parameter p: ``g = dL_r + mu_r (p - anchor) + wd p``; ``buf = m_r buf + g``
(starting at the first g); ``p -= lr_r buf`` (``p -= lr_r g`` without momentum). Each factor is
a number shared by all rows or an ``[R]`` tensor (Ditto's personal rows, padded steps, several
runs). The loss gradient arrives as ``add_grad(y, alpha)``, adding ``alpha * dL`` into ``y``: an
axpy for a materialised gradient, one ``baddbmm`` for a client-batched linear layer
(fedmoo.engine.lockstep), whose weight gradient then never exists as a tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Rows = float | Tensor  # a hyperparameter shared by all rows, or one value per row ``[R]``
AddGrad = Callable[[Tensor, Rows], object]


def per_row(v: Tensor, like: Tensor) -> Tensor:
    """``[R]`` factors shaped to broadcast over ``like`` ``[R, ...]``; a factor that already
    has ``like``'s number of dimensions (per column, fedmoo.engine.linear_head) is used as is."""
    return v if v.dim() == like.dim() else v.view(-1, *(1,) * (like.dim() - 1))


def axpy(y: Tensor, a: Rows, x: Tensor) -> Tensor:
    """``y += a * x`` in place, with ``a`` a number or one factor per row."""
    return y.add_(x, alpha=a) if isinstance(a, float) else y.addcmul_(per_row(a, y), x)


def scale(y: Tensor, a: Rows) -> Tensor:
    return y.mul_(a if isinstance(a, float) else per_row(a, y))


def is_zero(a: Rows | None) -> bool:
    """True for an absent or zero hyperparameter shared by all rows."""
    return a is None or (isinstance(a, float) and a == 0.0)


def add_tensor(g: Tensor) -> AddGrad:
    """``add_grad`` of a materialised gradient ``g``."""
    return lambda y, a: axpy(y, a, g)


# On a CPU, a layer with at most this many outputs gets its weight gradient as ``(d^T h)^T``:
# ``baddbmm`` with the transposed operand ``h^T`` takes a slow path there, 2-8x slower for
# narrow layers (logistic regression heads: [39, 4800, 784] x [39, 4800, 3] 1068 ms vs 131 ms;
# [200, 10, 99] x [200, 10, 2] 0.65 vs 0.38 ms), while wide layers (out 200) are 4x faster fused.
NARROW_OUT = 16


def add_product(h: Tensor, d: Tensor) -> AddGrad:
    """``add_grad`` of the gradient ``h^T d`` (``h [R, N, in]``, ``d [R, N, out]``) of a weight
    stored ``[R, in, out]``: one fused ``baddbmm`` into ``y`` (narrow layers on a CPU: one
    ``bmm`` and an axpy, see NARROW_OUT)."""
    ht = h.transpose(1, 2)
    if d.shape[-1] <= NARROW_OUT and h.device.type == "cpu":
        return lambda y, a: axpy(y, a, torch.bmm(d.transpose(1, 2), h).transpose(1, 2))

    def add(y: Tensor, a: Rows) -> Tensor:
        # the factor scales d before the product whether it is one number or one per row
        # (``alpha=a`` would scale the product instead: other bits, so a row's numbers would
        # depend on whether the rows trained beside it share its learning rate)
        return y.baddbmm_(ht, d * (a if isinstance(a, float) else per_row(a, d)))

    return add


@dataclass
class RowSGD:
    """This step's update of the parameter views ``views[i] [R, ...]`` of the stacked copies."""

    views: list[Tensor]
    bufs: list[Tensor] | None       # momentum buffers, like views (None without momentum)
    anchor: list[Tensor] | None     # each row's global model, views ``[1 or R, ...]`` (with mu)
    lr: Rows
    mu: Rows | None                 # proximal weight (FedProx mu, Ditto lambda), None = off
    momentum: Rows | None
    weight_decay: Rows

    def _decay(self, i: int, p: Tensor) -> Tensor | None:
        """``mu (p - anchor) + wd p``, or None when both are off."""
        wd = self.weight_decay
        if self.mu is None:
            return None if is_zero(wd) else scale(p.clone(), wd)
        e = scale(p - self.anchor[i], self.mu)
        return e if is_zero(wd) else axpy(e, wd, p)

    def __post_init__(self) -> None:
        self.neg_lr: Rows = -self.lr if isinstance(self.lr, float) else self.lr.neg()

    def apply(self, i: int, add_grad: AddGrad) -> None:
        p = self.views[i]
        neg_lr = self.neg_lr
        extra = self._decay(i, p)
        if self.bufs is None:
            if extra is None:
                add_grad(p, neg_lr)                # plain SGD: p -= lr dL, fused where possible
                return
            g = extra
            add_grad(g, 1.0)
        else:
            g = scale(self.bufs[i], self.momentum)  # buf = m buf + dL (+ extra)
            add_grad(g, 1.0)
            if extra is not None:
                g.add_(extra)
        axpy(p, neg_lr, g)
