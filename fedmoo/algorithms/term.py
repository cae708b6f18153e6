"""TERM, federated (Li, Beirami, Sanjabi & Smith, "Tilted Empirical Risk Minimization", ICLR 2021),
as in the federated trainer of the authors' code (litian96/TERM, fair_flearn/.../tilting.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import combine
from fedmoo.state import ServerState


@dataclass
class TERMState(ServerState):
    """``est``: running normaliser of the tilted weights (0-d float64 tensor, starts at 0)."""

    est: Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))


class TERM(Algorithm):
    """Tilted averaging: client weights grow like ``exp(t * loss)``, F = loss_before.

    ``normalization: reference`` (the authors' code): ``e_k = exp(t (F_k - M))``,
    ``est <- 0.5 est + 0.5 mean(e)``, ``omega_k = e_k / (est K)`` and
    ``w <- w - (1/K) sum omega_k g_k`` (the code's final plain average adds the 1/K, and est
    starts at 0 so round 0 weights are doubled). ``softmax``: ``omega = e / sum e`` and
    ``w <- w - sum omega_k g_k``.

    Reduces to uniform FedAvg at ``t = 0`` with ``normalization = softmax``.
    """

    name = "term"
    hp: declared.TERM
    state_cls = TERMState

    def step(self, state, cohort):
        f = cohort.require("loss_before", self.name).to(torch.float64).cpu()
        k_count = cohort.size
        # M = max F for t > 0, min F for t < 0: e in [0, 1], summing to at least 1 (the reference
        # code's max F overflows for t < 0: t = -100 with losses 0.1 and 20 gives NaN weights)
        shift = f.max() if self.hp.t > 0 else f.min()
        e = torch.exp(self.hp.t * (f - shift)) if self.hp.t != 0.0 else torch.ones_like(f)
        if self.hp.normalization == "softmax":
            omega = e / e.sum()
            return combine(omega, cohort.deltas), 1.0, {}, {"server/omega_max": float(omega.max())}
        est = 0.5 * state.est + 0.5 * e.mean()
        omega = e / (est * k_count)
        d = combine(omega / k_count, cohort.deltas)
        return d, 1.0, {"est": est}, {"server/omega_max": float(omega.max())}
