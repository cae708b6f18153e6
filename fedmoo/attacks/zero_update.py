"""Zero update: the attacker (a free rider) sends no change at all."""

from __future__ import annotations

from fedmoo.attacks.base import Attack
from fedmoo.config.hparams import attack as declared


class ZeroUpdate(Attack):
    """The attacker sends ``g_k = 0`` (losses honest). No hyperparameters."""

    name = "zero_update"
    hp: declared.Common

    def corrupt(self, cohort, rows, seed):
        d = cohort.deltas
        return cohort.replace(deltas=d.masked_fill(rows.view(-1, *(1,) * (d.dim() - 1)), 0.0))
