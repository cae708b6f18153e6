"""LossAvg: clients weighted by their training loss before local training (a simple fairness
heuristic in the spirit of q-FFL's q = 1, without its Lipschitz step size)."""

from __future__ import annotations

import torch

from fedmoo.algorithms import Algorithm


class LossAvg(Algorithm):
    """``p_k = f_k^power / sum_j f_j^power`` with ``f_k`` the loss of w_t on client k's data;
    ``w <- w - eta sum_k p_k g_k``. ``power = 0`` is FedAvg with uniform weights.

    Hyperparameters (declared in myproj/hparams.py): ``power``, the exponent of the loss in
    the weights, and ``eta``, the server learning rate.
    """

    def step(self, state, cohort):
        f = cohort.require("loss_before", self.name).to(cohort.deltas.dtype)
        weights = f.clamp_min(1e-12) ** self.hp.power
        p = weights / weights.sum()
        return p @ cohort.deltas, self.hp.eta, {}, {"server/max_weight": float(torch.max(p))}
