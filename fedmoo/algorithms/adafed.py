"""AdaFed (Hamidi & Yang, "AdaFed: Fair Federated Learning via Adaptive Common Descent Direction",
TMLR 2024)."""

from __future__ import annotations

import torch

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import combine, gram, normalizer
from fedmoo.moo.gram_schmidt import adafed_coefficients
from fedmoo.state import ClientSpec

# ``loss`` -> the Cohort field read as f_k
LOSS_FIELDS = {"local_last": "loss_after", "trained": "loss_trained", "global": "loss_before"}


class AdaFed(Algorithm):
    """A common descent direction whose directional derivatives are proportional to f_k^gamma.

    Loss-scaled Gram-Schmidt of the cohort's updates in cohort order (``g~_1 = g_1 / f_1^gamma``,
    ``g~_k = (g_k - sum_{i<k} c_ki g~_i) / (f_k^gamma - sum_{i<k} c_ki)``), then the min-norm point
    of their hull ``d = sum lam_k g~_k`` with ``lam_k`` proportional to ``1 / ||g~_k||^2``, and
    ``w <- w - eta d``. Then ``<g_k, d> = ||d||^2 f_k^gamma``: clients with a larger loss descend
    faster. d does not depend on the cohort order when the updates are linearly independent; a
    client whose update is (numerically) spanned by earlier ones is left out of the basis.
    Computed from the K x K Gram matrix and one weighted sum of the updates.

    Hyperparameters:
      gamma: fairness exponent >= 0 (grid {0, 0.01, 0.1, 1, 5, 10}).
      eta: server step > 0.
      loss: which f_k: ``local_last`` (the mean minibatch loss of the last local
        epoch, measured during training: Remark 5.2's "loss from the last iteration" as the
        third-party implementations compute it), ``trained`` (the loss of the trained local
        model on the client's whole training set: Algorithm 1 line 9's ``f_k(theta)`` read
        literally; the engine measures it through ``ClientSpec.eval_trained``) or ``global``
        (loss of w_t before local training).
      normalize: divide every update by its norm first (the paper divides only by f^gamma:
        false).

    Never exactly FedAvg: at gamma = 0 with orthogonal, equal-norm updates d is the uniform mean.
    """

    name = "adafed"
    hp: declared.AdaFed

    def client_spec(self, state, client_ids):
        return ClientSpec(eval_trained=self.hp.loss == "trained")

    @property
    def reads_before(self) -> bool:
        return LOSS_FIELDS[self.hp.loss] == "loss_before"

    def step(self, state, cohort):
        field = LOSS_FIELDS[self.hp.loss]
        f = cohort.require(field, self.name).to(torch.float64).cpu().clamp_min(1e-10)
        g = gram(cohort.deltas)
        scale = normalizer(g) if self.hp.normalize else torch.ones(cohort.size, dtype=torch.float64)
        coef, in_basis = adafed_coefficients(scale[:, None] * g * scale[None, :], f ** self.hp.gamma)
        d = combine(coef * scale, cohort.deltas)
        return d, self.hp.eta, {}, {"server/basis_size": float(in_basis.sum())}
