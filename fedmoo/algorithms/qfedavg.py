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
    ``loss_k`` is the loss of w_t on client k's training set (q-FFL's definition), or with
    ``loss_at: after`` the loss of the client's trained model on it (the FedFV authors' easyFL
    v1.0 code, whose client trains the model in place before measuring its loss). The squared
    norms are taken in float64, so updates whose norm passes float32's 1.8e19 still give the
    right (small) step instead of a silent zero.

    Hyperparameters:
      q: fairness exponent >= 0 (papers' grid {0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 15}).
      L: Lipschitz estimate > 0; null = 1 / client.lr, as in the authors' code
        (FedMGDA+ baseline grid L in {0.1, 1, 10}).
      loss_at: ``before`` (loss of w_t, q-FFL) or ``after`` (loss of the trained local
        model, measured by the engine through ``ClientSpec.eval_trained``).
      loss_report: ``mean`` (each client's mean loss) or ``batch_sum`` (the client reports the
        sum of its per-minibatch mean losses, ``mean x ceil(n_k / batch_size)``, through
        ``ClientSpec.loss_report``: the FedMGDA+ authors' Adult code, whose q-FFL step reads
        that sum with L = 1). An attack's change (the bias attack's ``+ b``) is made on the
        reported value.

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
