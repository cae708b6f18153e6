"""FedFA (Huang, Li, Liu, Yu & Zhou, "Fairness-aware Federated Learning", 2020), as implemented
by the FedFV authors in easyFL (the paper text was not available to us)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import TINY, combine
from fedmoo.state import ClientSpec, ServerState


@dataclass
class FedFAState(ServerState):
    """``freq [N]`` float64: times each client was selected; ``momentum [d]``: server momentum."""

    freq: Tensor | None = None
    momentum: Tensor | None = None


def _shares(v: Tensor) -> Tensor:
    """``v / sum v`` (``[K]``), uniform if the sum vanishes."""
    s = v.sum()
    return torch.where(s.abs() > TINY, v / s, torch.full_like(v, 1.0 / v.numel()))


class FedFA(Algorithm):
    """Weights from training accuracy and selection frequency, plus a damping server momentum.

    With acc_k = training accuracy (%) and f_k = times selected (this round included):
    ``A_k = -log2(acc_k / sum acc + 1e-6)``, ``Q_k = -log2(1 - f_k / sum f + 1e-5)``,
    ``p = (1 - beta) A / sum A + beta Q / sum Q``; ``w_avg = w_t - sum p_k g_k``;
    ``m <- gamma m + (1 - gamma)(w_avg - w_t)``; ``w_{t+1} = w_avg - client.lr * m``. The method's
    "double momentum" also needs ``client.momentum=0.9`` (as in the FedFV experiments).

    ``aggregate: uniform`` with ``acc_at: after`` is FedFA as easyFL v1.0 ran it: p is computed (from
    the trained local models' accuracy) but the server averages uniformly; ``server/p_max`` still
    reports p. ``acc_at: before`` takes the accuracy of w_t (later easyFL / FLGo).

    Not reducible to FedAvg (the weights are never n_k-proportional, and the server term always
    moves ``w_{t+1}`` off ``w_avg``).
    """

    name = "fedfa"
    hp: declared.FedFA
    kept_vectors = (0, 1)          # momentum [d]

    def init(self, w0, num_clients):
        w0 = w0.detach().clone()
        return FedFAState(w=w0, round=0, freq=torch.zeros(num_clients, dtype=torch.float64),
                          momentum=torch.zeros_like(w0))

    def client_spec(self, state, client_ids):
        return ClientSpec(eval_trained=self.hp.acc_at == "after")

    @property
    def reads_before(self) -> bool:
        return self.hp.acc_at == "before"

    def step(self, state, cohort):
        ids = cohort.client_ids.cpu()
        freq = state.freq.index_add(0, ids, torch.ones(cohort.size, dtype=torch.float64))
        f = freq[ids]
        field = "acc_trained" if self.hp.acc_at == "after" else "acc_before"
        acc = cohort.require(field, self.name).to(torch.float64).cpu()
        a = -torch.log2(acc / acc.sum().clamp_min(TINY) + 1e-6)
        q = -torch.log2(1.0 - f / f.sum() + 1e-5)
        p = (1.0 - self.hp.beta) * _shares(a) + self.hp.beta * _shares(q)
        weights = p if self.hp.aggregate == "weighted" else torch.full_like(p, 1.0 / cohort.size)
        avg_step = combine(weights, cohort.deltas)           # w_t - w_avg
        momentum = self.hp.gamma * state.momentum - (1.0 - self.hp.gamma) * avg_step
        d = avg_step + cohort.local_lr * momentum
        diag = {"server/p_max": float(p.max())}
        return d, 1.0, {"freq": freq, "momentum": momentum}, diag
