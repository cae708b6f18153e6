"""No attack: every client is honest."""

from __future__ import annotations

import torch

from fedmoo.attacks.base import Attack


class NoAttack(Attack):
    """Every client is honest: the cohort passes through unchanged. No hyperparameters."""

    name = "none"
    description = "no attack: every client is honest"

    def __init__(self):
        super().__init__()

    def bind(self, num_clients, client_names=None, num_classes=None):
        self.num_classes = num_classes
        self.attackers = torch.zeros(0, dtype=torch.long)
        self.mask = torch.zeros(num_clients, dtype=torch.bool)
        return self
