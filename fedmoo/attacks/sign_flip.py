"""Sign flipping (a classic Byzantine update): the attacker sends its update reversed."""

from __future__ import annotations

from fedmoo.attacks.base import Attack, require_number
from fedmoo.attacks.rows import scale_rows


class SignFlip(Attack):
    """The attacker sends ``-scale * g_k``: an ascent step on its own loss (losses honest).

    Hyperparameters: scale (>= 0, default 1: the plain reversed update).
    """

    name = "sign_flip"
    description = "attackers send -scale * their update (gradient ascent)"

    def __init__(self, scale: float = 1.0, **common):
        super().__init__(**common)
        self.scale = require_number("scale", scale, lo=0.0)

    def corrupt(self, cohort, rows, seed):
        return cohort.replace(deltas=scale_rows(cohort.deltas, rows, -self.scale))
