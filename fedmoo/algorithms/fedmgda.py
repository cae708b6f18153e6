"""FedMGDA+ family (Hu, Wang, Yu, Chen & Chen, "Federated Learning Meets Multi-objective
Optimization", IEEE TNSE 2022; official code watml/Fed-MGDA).

One implementation with four public presets: ``fedmgda``, ``fedmgda_plus``, ``fedavg_n`` and
``mgda_prox``. They differ only in their default hyperparameters.
"""

from __future__ import annotations

import torch

from fedmoo.algorithms.base import Algorithm, mixing_weights
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import combine, gram, normalizer
from fedmoo.moo.minnorm import min_norm_weights
from fedmoo.state import ClientSpec

DECAY_PERIOD = 100  # the step size is multiplied by beta every this many rounds
PAPER_ROUNDS = 2000  # the run length when none is given (built from Python, Flower): the paper's


class FedMGDA(Algorithm):
    """Multiple-gradient descent over the cohort's updates, inside a box around FedAvg's weights.

    ``lam = argmin 1/2 lam^T G lam`` with ``G_ij = <g_i, g_j>`` (normalised updates if
    ``normalize``), ``sum lam = 1``, ``max(0, lam0_k - eps) <= lam_k <= min(1, lam0_k + eps)``;
    ``d = sum lam_k g_k``; ``w <- w - eta_t d`` with ``eta_t = eta * beta^floor(t / 100)`` and
    ``beta = eta_decay^(100 / T)`` (decayed by ``eta_decay`` at the run's last round T, 2000 for a
    rule built without ``rounds``: over the paper's T, 1/10 gives the authors' per-100-round 0.89).
    With eps = 1 d is a common descent direction: ``<g_k, d> >= ||d||^2`` for every k. ``mu > 0``
    adds the clients' proximal term (MGDA-Prox).

    Reduces to FedAvg at ``epsilon = 0``, ``normalize = false``, ``eta = 1``, no decay, mu = 0
    (uniform weights with lambda0 = uniform, sample weights with lambda0 = samples).
    """

    name = "fedmgda"
    hp: declared.FedMGDA
    reads_before = False           # its rule reads no loss_before / acc_before

    def client_spec(self, state, client_ids):
        return ClientSpec(prox_mu=self.hp.mu)

    def step_size(self, round_idx: int) -> float:
        if self.hp.eta_decay is None:
            return self.hp.eta
        beta = self.hp.eta_decay ** (DECAY_PERIOD / (self.rounds or PAPER_ROUNDS))
        return self.hp.eta * beta ** (round_idx // DECAY_PERIOD)

    def step(self, state, cohort):
        g = gram(cohort.deltas)
        scale = normalizer(g) if self.hp.normalize else torch.ones(cohort.size, dtype=torch.float64)
        lam0 = mixing_weights(cohort, self.hp.lambda0).to(torch.float64).cpu()
        sol = min_norm_weights(scale[:, None] * g * scale[None, :], lam0, self.hp.epsilon, self.hp.solver)
        d = combine(sol.lam * scale, cohort.deltas)
        diag = {"server/lambda_max": float(sol.lam.max()),
                "server/qp_fallback": float(sol.method == "fallback")}
        return d, self.step_size(state.round), {}, diag
