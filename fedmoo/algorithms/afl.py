"""AFL, Agnostic Federated Learning (Mohri, Sivek & Suresh, ICML 2019): a minimax over client mixtures."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.errors import UserError
from fedmoo.moo.gram import combine
from fedmoo.moo.minnorm import project_simplex
from fedmoo.state import ServerState


@dataclass
class AFLState(ServerState):
    """``lam [N]`` float64: mixture weights over ALL clients; ``w_avg [d]``: average of iterates."""

    lam: Tensor | None = None
    w_avg: Tensor | None = None


class AFL(Algorithm):
    """Stochastic-AFL: gradient descent on w, projected gradient ascent on the mixture lambda.

    Every round (full participation): ``d = sum_k lam_k g_k / sum lam``, ``w <- w - eta d`` (the
    clients' local step plays the paper's gamma_w), then
    ``lam <- Proj_simplex(lam + gamma_lambda * loss)``, ``loss`` each client's ``loss_before``
    (the paper) or with ``loss: local_last`` its ``loss_after`` (the FedMGDA+ authors' Adult code).
    The reported model is the running average of the iterates (the paper, fair_flearn) unless
    ``average_iterates`` is false.

    Reduces to uniform FedAvg (evaluated at the last iterate) at ``gamma_lambda = 0`` with
    ``average_iterates = false``.
    """

    name = "afl"
    hp: declared.AFL
    kept_vectors = (0, 1)          # w_avg [d]

    def check_run(self, num_clients, clients_per_round):
        if clients_per_round < num_clients:
            raise UserError(
                f"algo=afl needs full participation but clients_per_round={clients_per_round} < "
                f"num_clients={num_clients}; set clients_per_round=null"
            )

    def init(self, w0, num_clients):
        w0 = w0.detach().clone()
        lam = torch.full((num_clients,), 1.0 / num_clients, dtype=torch.float64)
        return AFLState(w=w0, round=0, lam=lam, w_avg=w0.clone())

    @property
    def reads_before(self) -> bool:
        return self.hp.loss == "before"

    def step(self, state, cohort):
        ids = cohort.client_ids.cpu()
        lam_k = state.lam[ids]
        d = combine(lam_k / lam_k.sum(), cohort.deltas)
        w_next = state.w - self.hp.eta * d
        field = "loss_before" if self.hp.loss == "before" else "loss_after"
        loss = cohort.require(field, self.name).to(torch.float64).cpu()
        lam = project_simplex(state.lam.index_add(0, ids, self.hp.gamma_lambda * loss))
        t = state.round
        w_avg = (t * state.w_avg + w_next) / (t + 1)
        diag = {"server/lambda_max": float(lam.max()), "server/lambda_min": float(lam.min())}
        return d, self.hp.eta, {"lam": lam, "w_avg": w_avg}, diag

    def eval_params(self, state):
        return state.w_avg if self.hp.average_iterates else state.w
