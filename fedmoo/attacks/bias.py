"""Bias attack (FedMGDA+, Hu et al. 2022, Sec. 6.2): the attacker reports its loss plus b."""

from __future__ import annotations

from fedmoo.attacks.base import Attack, replace_losses
from fedmoo.config.hparams import attack as declared


class Bias(Attack):
    """Additive loss inflation: every reported loss becomes ``loss + b``; the update is honest, so
    only loss-weighted rules (AFL, q-FedAvg, FedFV's order, AdaFed) are affected."""

    name = "bias"
    hp: declared.Bias

    def corrupt(self, cohort, rows, seed):
        return replace_losses(cohort, lambda v: v + rows.to(v.dtype) * self.hp.b)
