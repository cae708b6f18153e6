"""LossAvg: clients weighted by their training loss before local training (a simple fairness
heuristic in the spirit of q-FFL's q = 1, without its Lipschitz step size).

The whole component is this module: its hyperparameters, its rule and the ``declare`` line that
makes it the option ``algo=lossavg`` (no YAML)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmoo.algorithms import Algorithm
from fedmoo.config.hparams import declare
from fedmoo.config.knobs import knob


@dataclass
class Params:
    power: float = knob(1.0, "exponent of the loss in the weights; 0 = FedAvg with uniform "
                        "weights", lo=0.0)
    eta: float = knob(1.0, "server learning rate", lo=0.0, lo_open=True)


class LossAvg(Algorithm):
    """``p_k = f_k^power / sum_j f_j^power`` with ``f_k`` the loss of w_t on client k's data;
    ``w <- w - eta sum_k p_k g_k``. ``power = 0`` is FedAvg with uniform weights."""

    hp: Params

    def step(self, state, cohort):
        f = cohort.require("loss_before", self.name).to(cohort.deltas.dtype)
        weights = f.clamp_min(1e-12) ** self.hp.power
        p = weights / weights.sum()
        return p @ cohort.deltas, self.hp.eta, {}, {"server/max_weight": float(torch.max(p))}


declare("algo", "lossavg", Params, LossAvg,
        "LossAvg (plugin example): clients weighted by loss^power before training")
