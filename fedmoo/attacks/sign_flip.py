"""Sign flipping (a classic Byzantine update): the attacker sends its update reversed."""

from __future__ import annotations

from fedmoo.attacks.base import Attack, scale_rows
from fedmoo.config.hparams import attack as declared


class SignFlip(Attack):
    """The attacker sends ``-scale * g_k``: an ascent step on its own loss (losses honest)."""

    name = "sign_flip"
    hp: declared.SignFlip

    def corrupt(self, cohort, rows, seed):
        return cohort.replace(deltas=scale_rows(cohort.deltas, rows, -self.hp.scale))
