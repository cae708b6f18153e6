"""Zero update: the attacker (a free rider) sends no change at all."""

from __future__ import annotations

from fedmoo.attacks.base import Attack
from fedmoo.attacks.rows import row_view
from fedmoo.config.hparams import attack as declared


class ZeroUpdate(Attack):
    """The attacker sends ``g_k = 0`` (losses honest). No hyperparameters."""

    name = "zero_update"
    hp: declared.Common

    def corrupt(self, cohort, rows, seed):
        d = cohort.deltas
        return cohort.replace(deltas=d.masked_fill(row_view(rows, d), 0.0))
