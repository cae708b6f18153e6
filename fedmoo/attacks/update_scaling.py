"""Update scaling: the attacker multiplies its pseudo-gradient by a factor (a boosted update)."""

from __future__ import annotations

from fedmoo.attacks.base import Attack, scale_rows
from fedmoo.config.hparams import attack as declared


class UpdateScaling(Attack):
    """The attacker sends ``factor * g_k`` (losses honest)."""

    name = "update_scaling"
    hp: declared.UpdateScaling

    def corrupt(self, cohort, rows, seed):
        return cohort.replace(deltas=scale_rows(cohort.deltas, rows, self.hp.factor))
