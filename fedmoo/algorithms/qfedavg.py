"""q-FedAvg (Li, Sanjabi, Beirami & Smith, "Fair Resource Allocation in Federated Learning", ICLR 2020)."""

from __future__ import annotations

import torch

from fedmoo.algorithms import register
from fedmoo.algorithms.base import Algorithm, require_range
from fedmoo.moo.gram import combine


@register
class QFedAvg(Algorithm):
    """q-FFL solved with q-FedAvg: clients with a larger loss get a larger weight.

    With ``F_k = loss_before_k + 1e-10`` (loss of w_t on client k's training set) and
    ``DW_k = L g_k``: ``Delta_k = F_k^q DW_k``,
    ``h_k = q F_k^(q-1) ||DW_k||^2 + L F_k^q`` and ``w_{t+1} = w_t - sum Delta_k / sum h_k``.

    Hyperparameters:
      q: fairness exponent >= 0 (papers' grid {0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 15}; default 1).
      L: Lipschitz estimate > 0; null (default) = 1 / client.lr, as in the authors' code
        (FedMGDA+ baseline grid L in {0.1, 1, 10}).

    Reduces to uniform FedAvg (the plain mean of the local models) at ``q = 0``.
    """

    name = "qfedavg"
    description = "q-FedAvg (q-FFL): reweights clients by loss^q for a fairer accuracy spread"

    def __init__(self, q: float = 1.0, L: float | None = None):
        self.q = require_range("q", q, 0.0, None, self.name)
        self.L = None if L is None else require_range("L", L, 0.0, None, self.name, lo_open=True)

    def step(self, state, cohort):
        f = cohort.require("loss_before", self.name).to(torch.float64).cpu() + 1e-10
        lip = 1.0 / cohort.local_lr if self.L is None else self.L
        sq = torch.linalg.vector_norm(cohort.deltas, dim=1).to(torch.float64).cpu() ** 2
        fq = f ** self.q
        h = self.q * f ** (self.q - 1.0) * (lip * lip) * sq + lip * fq
        coef = lip * fq / h.sum()
        return combine(coef, cohort.deltas), 1.0, {}, {"server/h_sum": float(h.sum())}
