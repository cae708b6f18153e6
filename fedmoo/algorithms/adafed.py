"""AdaFed (Hamidi & Yang, "AdaFed: Fair Federated Learning via Adaptive Common Descent Direction",
TMLR 2024)."""

from __future__ import annotations

import torch

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.gram import adafed_coefficients, combine, gram, normalizer
from fedmoo.state import ClientSpec

# ``loss`` -> the Cohort field read as f_k
LOSS_FIELDS = {"local_last": "loss_after", "trained": "loss_trained", "global": "loss_before"}


class AdaFed(Algorithm):
    """A common descent direction whose directional derivatives are proportional to f_k^gamma.

    Loss-scaled Gram-Schmidt of the cohort's updates in cohort order (``g~_1 = g_1 / f_1^gamma``,
    ``g~_k = (g_k - sum_{i<k} c_ki g~_i) / (f_k^gamma - sum_{i<k} c_ki)``), then the min-norm point
    of their hull ``d = sum lam_k g~_k`` with ``lam_k`` proportional to ``1 / ||g~_k||^2``, and
    ``w <- w - eta d``: then ``<g_k, d> = ||d||^2 f_k^gamma``. A client whose update is
    (numerically) spanned by earlier ones is left out of the basis. Computed from the K x K Gram
    matrix and one weighted sum of the updates.

    ``loss`` picks f_k: ``local_last`` (mean minibatch loss of the last local epoch: Remark 5.2 as
    third-party implementations compute it), ``trained`` (the trained local model's loss on the
    client's training set: Algorithm 1 line 9 read literally) or ``global`` (loss of w_t).
    ``normalize`` divides every update by its norm first (the paper divides only by f^gamma).

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
