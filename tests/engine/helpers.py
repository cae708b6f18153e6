"""Tiny federations and models for the engine tests (float64, so the engines must agree to ~1e-12)."""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedmoo.engine.base import LocalSGD
from fedmoo.data.federated import ClientSplit, FederatedData
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.sequential import SequentialEngine


def federation(sizes, input_shape, num_classes, tokens: bool = False, seed: int = 0) -> FederatedData:
    """Clients of the given train sizes (samples interleaved across clients), 3 test samples each."""
    g = torch.Generator().manual_seed(seed)
    n_train, n_clients = sum(sizes), len(sizes)
    total = n_train + 3 * n_clients
    if tokens:
        x = torch.randint(0, num_classes, (total, *input_shape), generator=g).double()
    else:
        x = torch.randn(total, *input_shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, num_classes, (total,), generator=g)
    owner = np.repeat(np.arange(n_clients), sizes)
    order = np.random.default_rng(seed).permutation(n_train)  # clients' samples are not contiguous
    train = [order[owner == k] for k in range(n_clients)]
    test = [n_train + 3 * k + np.arange(3) for k in range(n_clients)]
    return FederatedData(x=x, y=y, train=ClientSplit.from_lists(train),
                         test=ClientSplit.from_lists(test), val=None, num_classes=num_classes,
                         input_shape=tuple(input_shape))


class SmallCNN(nn.Module):
    """conv 3x3 -> ReLU -> maxpool -> conv 3x3 -> ReLU -> avgpool -> linear."""

    def __init__(self, channels: int = 2, classes: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 5, 3)
        self.fc = nn.Linear(5 * 2 * 2, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 1)
        return self.fc(x.flatten(1))


class TinyLSTM(nn.Module):
    """Embedding -> hand-written LSTM cell over the sequence -> linear on the last state."""

    def __init__(self, vocab: int = 5, embed: int = 3, hidden: int = 4):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, embed)
        self.w_ih = nn.Parameter(torch.randn(4 * hidden, embed) * 0.5)
        self.w_hh = nn.Parameter(torch.randn(4 * hidden, hidden) * 0.5)
        self.bias = nn.Parameter(torch.zeros(4 * hidden))
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        seq = self.embed(x.long())
        h = seq.new_zeros(seq.shape[0], self.hidden)
        c = torch.zeros_like(h)
        for t in range(seq.shape[1]):
            i, f, g, o = (seq[:, t] @ self.w_ih.T + h @ self.w_hh.T + self.bias).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.out(h)


def both(model: nn.Module, data: FederatedData, program: str = "auto", **client):
    """A sequential and a batched engine (running ``program``) on independent copies of
    ``model`` (float64)."""
    client.setdefault("lr", 0.1)
    client.setdefault("batch_size", 4)
    sgd = LocalSGD(**client)
    return (SequentialEngine(copy.deepcopy(model).double(), data, sgd),
            BatchedEngine(copy.deepcopy(model).double(), data, sgd, program=program))


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))
