"""Minibatch SGD for the sequential engine, ``torch.optim.SGD``'s single-tensor arithmetic (no
dampening, no Nesterov; bit-identical): ``d = g + wd * p``; ``b = d`` on the first step, else
``b = m * b + d``; ``p -= lr * b``; a parameter without a gradient takes no step. Not
``torch.optim.SGD`` itself: its first ``step()`` imports ``torch._dynamo`` (about 1.5 s a run).
"""

from __future__ import annotations

import torch
from torch import Tensor


class SGD:
    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params: list[Tensor] = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), float(weight_decay)
        self.buffers: list[Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d = p.grad
            if self.weight_decay:
                d = d.add(p, alpha=self.weight_decay)
            if self.momentum:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = torch.clone(d).detach()
                else:
                    buf.mul_(self.momentum).add_(d)
                d = buf
            p.add_(d, alpha=-self.lr)
