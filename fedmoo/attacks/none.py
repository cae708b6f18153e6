"""No attack: every client is honest."""

from __future__ import annotations

from fedmoo.attacks.base import Attack
from fedmoo.config.hparams import attack as declared


class NoAttack(Attack):
    """Every client is honest: the cohort passes through unchanged.

    ``malicious`` may still name would-be attackers that behave honestly,
    so a clean run reports ``benign/...`` and ``attackers/...`` over the same clients as an
    attacked one (the robustness matrix compares them column by column).
    """

    name = "none"
    hp: declared.NoAttack
