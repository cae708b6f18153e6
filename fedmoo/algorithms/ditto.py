"""Ditto (Li, Hu, Beirami & Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedmoo.algorithms.base import Algorithm, mixing_weights
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import combine
from fedmoo.state import ClientSpec, ServerState


@dataclass
class DittoState(ServerState):
    """``personal [N, d]``: every client's personal model (stale for clients not sampled)."""

    personal: Tensor | None = None


class Ditto(Algorithm):
    """Global FedAvg model plus one personal model per client, regularised toward it.

    On every local minibatch the engine steps the personal model on
    ``F_k(v) + (lam/2) ||v - w_t||^2``, then the global copy on ``F_k(w)``. The server averages the
    global updates uniformly and stores the cohort's new personal models; ``test/...`` evaluates
    each client's personal model, ``global/...`` the global one.

    The global model is exactly uniform FedAvg for every lam (only the evaluated models differ).
    """

    name = "ditto"
    hp: declared.Ditto
    reads_before = False           # its rule reads no loss_before / acc_before
    kept_vectors = (1, 0)          # personal [N, d]

    def init(self, w0, num_clients):
        w0 = w0.detach().clone()
        return DittoState(w=w0, round=0, personal=w0.expand(num_clients, -1).clone())

    def client_spec(self, state, client_ids):
        rows = client_ids.to(state.personal.device)
        return ClientSpec(personal=state.personal[rows], personal_lam=self.hp.lam)

    def step(self, state, cohort):
        personal = cohort.require("personal", self.name)
        rows = cohort.client_ids.to(state.personal.device)
        new_personal = state.personal.index_copy(0, rows, personal.to(state.personal))
        d = combine(mixing_weights(cohort, "uniform"), cohort.deltas)
        return d, 1.0, {"personal": new_personal}, {}

    def eval_params(self, state):
        return state.personal

    def extra_eval_params(self, state):
        return {"global": state.w}
