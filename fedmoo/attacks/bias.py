"""Bias attack (FedMGDA+, Hu et al. 2022, Sec. 6.2): the attacker reports its loss plus b."""

from __future__ import annotations

from fedmoo.attacks.base import Attack
from fedmoo.config.hparams import attack as declared


class Bias(Attack):
    """Additive loss inflation: every reported loss (``loss_before``, ``loss_after`` and, when
    asked for, ``loss_trained``) becomes ``loss + b``.

    The update is the honest one, so rules that never read losses (FedAvg, FedMGDA+, the robust
    aggregators) are unaffected; loss-weighted rules (AFL, q-FedAvg, FedFV's order, AdaFed) are.

    Hyperparameters: b (the bias, any finite number; 0 = honest).
    """

    name = "bias"
    hp: declared.Bias

    def corrupt(self, cohort, rows, seed):
        changes = {}
        for name in ("loss_before", "loss_after", "loss_trained"):
            v = getattr(cohort, name)
            if v is not None:
                changes[name] = v + rows.to(v.dtype) * self.hp.b
        return cohort.replace(**changes)
