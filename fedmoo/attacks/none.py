"""No attack: every client is honest."""

from __future__ import annotations

import torch

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

    def bind(self, num_clients, client_names=None, num_classes=None):
        if self.hp.malicious is not None:
            return super().bind(num_clients, client_names, num_classes)
        self.num_classes = num_classes
        self.attackers = torch.zeros(0, dtype=torch.long)
        self.mask = torch.zeros(num_clients, dtype=torch.bool)
        return self
