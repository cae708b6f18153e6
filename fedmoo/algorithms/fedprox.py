"""FedProx (Li et al., MLSys 2020): FedAvg with a proximal term in the clients' objective."""

from __future__ import annotations

from fedmoo.algorithms.fedavg import FedAvg
from fedmoo.config.hparams import algo as declared
from fedmoo.state import ClientSpec


class FedProx(FedAvg):
    """FedAvg whose clients minimise ``F_k(w) + (mu/2) ||w - w_t||^2`` (w_t frozen at round start).

    The FedMGDA+ code's ``prox_weight`` has no 1/2, i.e. prox_weight = mu/2. Reduces to FedAvg (same
    weighting and eta) at ``mu = 0``.
    """

    name = "fedprox"
    hp: declared.FedProx

    def client_spec(self, state, client_ids):
        return ClientSpec(prox_mu=self.hp.mu)
