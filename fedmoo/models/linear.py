"""Logistic regression and multilayer perceptrons on flattened inputs."""

from __future__ import annotations

import math

import torch
from torch import nn

from fedmoo.models import Model


class LogReg(Model):
    """Multinomial logistic regression ``x -> W x + b``, the bias starting at zero.

    ``softmax_output=True`` returns ``softmax(W x + b)``, to which the engine's cross-entropy then
    applies a second softmax: the FedFV authors' code for the FMNIST 3-client table, whose dynamics
    depend on it (see docs)."""

    name = "logreg"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        self.linear = nn.Linear(math.prod(input_shape), num_classes)
        nn.init.zeros_(self.linear.bias)
        self.softmax_output = self.hparams["softmax_output"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x.flatten(1))
        return torch.softmax(out, dim=1) if self.softmax_output else out


def relu_layers(sizes: list[int]) -> list[nn.Module]:
    """``nn.Linear(a, b), nn.ReLU()`` for each consecutive pair ``a, b`` of ``sizes``."""
    return [m for a, b in zip(sizes[:-1], sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())]


class MLP(Model):
    """Fully connected ReLU network ``in -> hidden[0] -> ... -> num_classes``."""

    name = "mlp"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        sizes = [math.prod(input_shape), *self.hparams["hidden"]]
        self.net = nn.Sequential(*relu_layers(sizes), nn.Linear(sizes[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))
