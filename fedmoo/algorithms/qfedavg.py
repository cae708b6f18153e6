"""q-FedAvg (Li, Sanjabi, Beirami & Smith, "Fair Resource Allocation in Federated Learning", ICLR 2020)."""

from __future__ import annotations

import torch

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import combine, sq_norms
from fedmoo.state import ClientSpec


class QFedAvg(Algorithm):
    """q-FFL solved with q-FedAvg: clients with a larger loss get a larger weight.

    With ``F_k = loss_k + 1e-10`` and ``DW_k = L g_k``: ``Delta_k = F_k^q DW_k``,
    ``h_k = q F_k^(q-1) ||DW_k||^2 + L F_k^q`` and ``w_{t+1} = w_t - sum Delta_k / sum h_k``.
    ``loss_k`` is the loss of w_t on client k's training set (q-FFL), or with ``loss_at: after``
    of the client's trained model (easyFL v1.0). ``loss_report: batch_sum`` has the clients report
    the sum of their per-minibatch mean losses (the FedMGDA+ authors' Adult code); an attack's
    change is made on the reported value. Squared norms are taken in float64.

    Reduces to uniform FedAvg (the plain mean of the local models) at ``q = 0``.
    """

    name = "qfedavg"
    hp: declared.QFedAvg

    def client_spec(self, state, client_ids):
        return ClientSpec(eval_trained=self.hp.loss_at == "after",
                          loss_report=self.hp.loss_report)

    @property
    def reads_before(self) -> bool:
        return self.hp.loss_at == "before"

    def step(self, state, cohort):
        field = "loss_trained" if self.hp.loss_at == "after" else "loss_before"
        f = cohort.require(field, self.name).to(torch.float64).cpu() + 1e-10
        lip = 1.0 / cohort.local_lr if self.hp.L is None else self.hp.L
        sq = sq_norms(cohort.deltas)                 # ||g_k||^2, in float64
        fq = f ** self.hp.q
        h = self.hp.q * f ** (self.hp.q - 1.0) * (lip * lip) * sq + lip * fq
        coef = lip * fq / h.sum()
        return combine(coef, cohort.deltas), 1.0, {}, {"server/h_sum": float(h.sum())}
