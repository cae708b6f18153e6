"""No attack: every client is honest."""

from __future__ import annotations

from fedmoo.attacks.base import Attack
from fedmoo.config.hparams import attack as declared


class NoAttack(Attack):
    """Every client is honest. ``malicious`` may still name would-be attackers, so a clean run
    reports ``benign/...`` and ``attackers/...`` over the same clients as an attacked one."""

    name = "none"
    hp: declared.NoAttack
