"""TERM, federated (Li, Beirami, Sanjabi & Smith, "Tilted Empirical Risk Minimization", ICLR 2021),
as in the federated trainer of the authors' code (litian96/TERM, fair_flearn/.../tilting.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import combine
from fedmoo.state import ServerState


@dataclass
class TERMState(ServerState):
    """``est``: running normaliser of the tilted weights (0-d float64 tensor, starts at 0)."""

    est: Tensor | None = None


def tilted_exp(f: Tensor, t: float) -> Tensor:
    """``e_k = exp(t (F_k - M))`` with ``M = max F`` for ``t > 0``, ``min F`` for ``t < 0`` (``e = 1``
    at ``t = 0``): finite, in [0, 1] and summing to at least 1. Shifting by ``max F`` for a negative
    tilt (the reference code) overflows: t = -100 with losses 0.1 and 20 gives NaN weights."""
    if t == 0.0:
        return torch.ones_like(f)
    shift = f.max() if t > 0 else f.min()
    return torch.exp(t * (f - shift))


class TERM(Algorithm):
    """Tilted averaging: client weights grow like ``exp(t * loss)``, F = loss_before.

    ``normalization: reference`` (the authors' code): ``e_k = exp(t (F_k - M))`` (``tilted_exp``),
    ``est <- 0.5 est + 0.5 mean(e)``, ``omega_k = e_k / (est K)`` and
    ``w <- w - (1/K) sum omega_k g_k`` (the code's final plain average adds the 1/K, and est
    starts at 0 so round 0 weights are doubled). ``softmax``: ``omega = e / sum e`` and
    ``w <- w - sum omega_k g_k``.

    Reduces to uniform FedAvg at ``t = 0`` with ``normalization = softmax``.
    """

    name = "term"
    hp: declared.TERM
    state_cls = TERMState

    def init(self, w0, num_clients):
        return TERMState(w=w0.detach().clone(), round=0, est=torch.zeros((), dtype=torch.float64))

    def step(self, state, cohort):
        f = cohort.require("loss_before", self.name).to(torch.float64).cpu()
        k_count = cohort.size
        e = tilted_exp(f, self.hp.t)
        if self.hp.normalization == "softmax":
            omega = e / e.sum()
            return combine(omega, cohort.deltas), 1.0, {}, {"server/omega_max": float(omega.max())}
        est = 0.5 * state.est + 0.5 * e.mean()
        omega = e / (est * k_count)
        d = combine(omega / k_count, cohort.deltas)
        return d, 1.0, {"est": est}, {"server/omega_max": float(omega.max())}
