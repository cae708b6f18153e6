"""Character LSTM of the LEAF / q-FFL Shakespeare task, with the recurrence written from plain
tensor operations (no ``nn.LSTM``) so a batched engine can vectorise it over clients."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedmoo.models import Model


def _scan(xw: Tensor, w_hh_t: Tensor, hidden: int) -> Tensor:
    """The recurrence over ``xw [..., B, T, 4H]`` (input projection plus bias) with the
    transposed recurrent weight ``w_hh_t [..., H, 4H]``; returns every step's h ``[..., B, T, H]``.
    Gates in ``nn.LSTM``'s order (input, forget, cell, output)."""
    h = xw.new_zeros(*xw.shape[:-2], hidden)
    c = torch.zeros_like(h)
    steps = []
    for t in range(xw.shape[-2]):
        i, f, g, o = (xw[..., t, :] + h @ w_hh_t).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        steps.append(h)
    return torch.stack(steps, dim=-2)


class LSTMLayer(nn.Module):
    """One LSTM layer over a whole sequence: ``[i, f, g, o] = x_t W_ih^T + h W_hh^T + b``,
    ``c' = s(f) c + s(i) tanh(g)``, ``h' = s(o) tanh(c')``, with one bias vector (TensorFlow's
    cell; ``nn.LSTM``'s ``b_ih + b_hh`` is the same function) and the input projection of all T
    steps as one matrix product."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size).uniform_(-bound, bound))

    def forward(self, seq: Tensor) -> Tensor:
        """``seq [B, T, E]`` -> the hidden states ``[B, T, H]``."""
        return _scan(seq @ self.weight_ih.T + self.bias, self.weight_hh.T, self.hidden_size)

    def stacked_forward(self, params: dict[str, Tensor], seq: Tensor) -> Tensor:
        """The same for R client copies at once (fedmoo.engine.lockstep): ``params`` hold
        ``[R, ...]`` weights, ``seq`` is ``[R, B, T, E]``; every product is one batched matmul."""
        r, b, t, e = seq.shape
        xw = torch.baddbmm(params["bias"].unsqueeze(1), seq.reshape(r, b * t, e),
                           params["weight_ih"].transpose(1, 2))
        w_hh_t = params["weight_hh"].transpose(1, 2).contiguous()     # [R, H, 4H]: bmm reads it densely
        return _scan(xw.view(r, b, t, -1), w_hh_t, self.hidden_size)


class LSTMShakespeare(Model):
    """Embedding(vocab, ``embed_dim``) -> ``layers`` stacked LSTMs of ``hidden`` units -> dense
    classes on the last step (LEAF / q-FFL / FedMGDA+: 8, 2 x 256, 80). Input: token indices
    (any dtype)."""

    name = "lstm_shakespeare"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        embed_dim, hidden, layers = (self.hparams[k] for k in ("embed_dim", "hidden", "layers"))
        self.embed = nn.Embedding(num_classes, embed_dim)
        sizes = [embed_dim] + [hidden] * layers
        self.cells = nn.ModuleList(LSTMLayer(a, hidden) for a in sizes[:-1])
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        seq = self.embed(x.long())                              # [B, T, E]
        for layer in self.cells:
            seq = layer(seq)
        return self.out(seq[:, -1])
