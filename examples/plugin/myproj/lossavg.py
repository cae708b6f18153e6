"""LossAvg: clients weighted by their training loss before local training (a simple fairness
heuristic in the spirit of q-FFL's q = 1, without its Lipschitz step size)."""

from __future__ import annotations

import torch

from fedmoo.algorithms import Algorithm, register
from fedmoo.algorithms.base import require_range


@register
class LossAvg(Algorithm):
    """``p_k = f_k^power / sum_j f_j^power`` with ``f_k`` the loss of w_t on client k's data;
    ``w <- w - eta sum_k p_k g_k``. ``power = 0`` is FedAvg with uniform weights.

    Hyperparameters:
      power: exponent of the loss in the weights (default 1).
      eta: server learning rate (default 1).
    """

    name = "lossavg"
    description = "LossAvg (plugin example): clients weighted by loss^power before training"

    def __init__(self, power: float = 1.0, eta: float = 1.0):
        self.power = require_range("power", power, 0.0, None, self.name)
        self.eta = require_range("eta", eta, 0.0, None, self.name, lo_open=True)

    def step(self, state, cohort):
        f = cohort.require("loss_before", self.name).to(cohort.deltas.dtype)
        weights = f.clamp_min(1e-12) ** self.power
        p = weights / weights.sum()
        return p @ cohort.deltas, self.eta, {}, {"server/max_weight": float(torch.max(p))}
