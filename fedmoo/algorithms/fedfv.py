"""FedFV (Wang, Xu, Liu, Zhou & Chen, "Federated Learning with Fair Averaging", IJCAI 2021),
with the semantics of the authors' code release (easyFL v1.0)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import TINY, combine, gram, project_conflicts, remove_conflict, row_dots
from fedmoo.state import ServerState


@dataclass
class FedFVState(ServerState):
    """``history [N, d]``: each client's last pseudo-gradient (``[0, d]`` when tau = 0);
    ``last_round [N]`` (int64, CPU): the round it was sent, -1 if never."""

    history: Tensor | None = None
    last_round: Tensor | None = None


class FedFV(Algorithm):
    """Mitigate gradient conflicts inside the cohort and against recent rounds' clients.

    1. Order the cohort by ``loss_before`` ascending (``order``: ``random`` / ``reverse`` are the
       paper's ablations). 2. The ~alpha K largest-loss clients (``order[ceil((K-1)(1-alpha)):]``,
       none at alpha = 0) keep their update. 3. Every other client's update is projected, for j
       in that order, off each ORIGINAL update g_j it conflicts with (``<g_j, g_i'> < 0``).
       4. ``g = mean_k g_k'``. 5. If ``t >= tau``: for each of the last tau rounds, oldest first,
       g is projected off the sum of the history updates of that round's clients that conflict
       with it (``history: paper``: rounds t-tau..t-1; ``flgo``: t-tau+1..t, from round tau-1 on,
       as FLGo, which numbers rounds from 1). 6. g is rescaled to the norm of the plain mean of the
       original updates. 7. ``w <- w - eta g``.

    Reduces to uniform FedAvg at ``alpha = 1, tau = 0``.
    """

    name = "fedfv"
    hp: declared.FedFV

    @property
    def kept_vectors(self) -> tuple[int, int]:
        return (int(self.hp.tau > 0), 0)                 # history [N, d] (none when tau = 0)

    def init(self, w0, num_clients):
        w0 = w0.detach().clone()
        rows = num_clients if self.hp.tau > 0 else 0
        return FedFVState(w=w0, round=0, history=w0.new_zeros(rows, w0.numel()),
                          last_round=torch.full((num_clients,), -1, dtype=torch.long))

    def step(self, state, cohort):
        k_count, t = cohort.size, state.round
        loss = cohort.require("loss_before", self.name).to(torch.float64).cpu()
        if self.hp.order == "random":
            order = torch.from_numpy(np.random.default_rng([self.hp.seed, t]).permutation(k_count))
        else:
            order = torch.sort(loss, stable=True, descending=self.hp.order == "reverse").indices
        start = math.ceil((k_count - 1) * (1.0 - self.hp.alpha)) if self.hp.alpha > 0 else k_count
        project = torch.ones(k_count, dtype=torch.bool)
        project[order[start:]] = False
        g_mat = gram(cohort.deltas)
        coef = project_conflicts(g_mat, order, project).mean(0)
        g = combine(coef, cohort.deltas)

        changes = {}
        if self.hp.tau > 0:
            ids = cohort.client_ids.cpu()
            hist = state.history.index_copy(0, ids.to(state.history.device),
                                            cohort.deltas.to(state.history.dtype))
            last = state.last_round.index_copy(0, ids, torch.full_like(ids, t))
            changes = {"history": hist, "last_round": last}
            # step 5, from round tau on (FLGo counts rounds from 1: from fedmoo's round tau - 1)
            first = self.hp.tau if self.hp.history == "paper" else self.hp.tau - 1
            if t >= first:
                for k in range(first, first - self.hp.tau, -1):   # the last tau rounds, oldest first
                    rows = (last == t - k).nonzero().flatten()
                    if rows.numel():
                        past = hist[rows.to(hist.device)].to(g.dtype)
                        conflicting = (row_dots(past, g) < 0).to(g.dtype)
                        g = remove_conflict(g, conflicting @ past)

        uniform = torch.full((k_count,), 1.0 / k_count, dtype=torch.float64)
        target = (uniform @ g_mat @ uniform).clamp_min(0.0).sqrt()
        norm = torch.linalg.vector_norm(g, dtype=torch.float64)   # float32 overflows past 1.8e19
        g = g * (target.to(norm) / norm.clamp_min(TINY)).to(g)
        return g, self.hp.eta, changes, {"server/kept": float(k_count - start)}
