"""FedAvg (McMahan et al., AISTATS 2017): weighted average of the clients' pseudo-gradients."""

from __future__ import annotations

from fedmoo.algorithms.base import Algorithm, mixing_weights
from fedmoo.config.hparams import algo as declared


class FedAvg(Algorithm):
    """Federated averaging: ``d = sum_k p_k g_k`` (``weighting``: samples or uniform), ``w <- w - eta d``."""

    name = "fedavg"
    hp: declared.FedAvg
    reads_before = False           # its rule reads no loss_before / acc_before

    def step(self, state, cohort):
        p = mixing_weights(cohort, self.hp.weighting)
        return p @ cohort.deltas, self.hp.eta, {}, {}
