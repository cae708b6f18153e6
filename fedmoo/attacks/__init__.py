"""Attacks on chosen clients. ``build(attack_cfg, num_clients)`` -> object with ``apply(cohort)``.

Attacks act on the Cohort (or on the attacker's objective), never inside algorithm code.
"""

from __future__ import annotations

from typing import Any

from fedmoo.errors import UserError
from fedmoo.state import Cohort


class NoAttack:
    """Every client is honest: the cohort passes through unchanged."""

    name = "none"

    def apply(self, cohort: Cohort) -> Cohort:
        return cohort


ATTACKS = {"none": NoAttack}


def build(cfg: dict[str, Any], num_clients: int):
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    cfg.pop("description", None)
    if name not in ATTACKS:
        raise UserError(f"unknown attack {name!r}; choose one of: {', '.join(sorted(ATTACKS))}")
    return ATTACKS[name](**cfg)
