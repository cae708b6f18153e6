"""Character LSTM of the LEAF / q-FFL Shakespeare task, with the recurrent cell written from
plain tensor operations (no ``nn.LSTM``) so a batched engine can vectorise it over clients."""

from __future__ import annotations

import math

import torch
from torch import nn


class LSTMCell(nn.Module):
    """One LSTM step with gates in ``nn.LSTM``'s order (input, forget, cell, output):
    ``[i, f, g, o] = x W_ih^T + h W_hh^T + b``, ``c' = s(f) c + s(i) tanh(g)``,
    ``h' = s(o) tanh(c')``. One bias vector (as TensorFlow's cell); ``nn.LSTM``'s two biases
    ``b_ih + b_hh`` are the same function."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        gates = x @ self.weight_ih.T + h @ self.weight_hh.T + self.bias
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class LSTMShakespeare(nn.Module):
    """Embedding(vocab, 8) -> ``layers`` stacked LSTMs of ``hidden`` units -> dense classes on the
    last step (LEAF / q-FFL / FedMGDA+: 8, 2 x 256, 80). Input: token indices (any dtype)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, embed_dim: int = 8,
                 hidden: int = 256, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(num_classes, embed_dim)
        sizes = [embed_dim] + [hidden] * layers
        self.cells = nn.ModuleList(LSTMCell(a, hidden) for a in sizes[:-1])
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.embed(x.long())                              # [B, T, E]
        for cell in self.cells:
            h = seq.new_zeros(seq.shape[0], cell.hidden_size)
            c = torch.zeros_like(h)
            steps = []
            for t in range(seq.shape[1]):
                h, c = cell(seq[:, t], h, c)
                steps.append(h)
            seq = torch.stack(steps, dim=1)
        return self.out(seq[:, -1])
