"""Loss-scaling attack (FedMGDA+, Hu et al. 2022, Sec. 6.2): the attacker trains on c * loss."""

from __future__ import annotations

import dataclasses

import torch

from fedmoo.attacks.base import Attack, replace_losses
from fedmoo.config.hparams import attack as declared


class LossScaling(Attack):
    """Multiplicative loss inflation: the attacker trains on ``c * f_k`` (``ClientSpec.loss_scale``,
    so its update scales by about c) and reports ``c`` times its losses. Gradient normalisation
    (FedMGDA+, FedAvg-n) removes the effect on the update direction."""

    name = "loss_scaling"
    hp: declared.LossScaling

    def client_spec(self, spec, client_ids):
        rows = self.rows(client_ids)
        if not bool(rows.any()):
            return spec
        factor = torch.where(rows, self.hp.c, 1.0).to(torch.float64)
        if spec.loss_scale is not None:
            factor = factor.to(spec.loss_scale) * spec.loss_scale
        return dataclasses.replace(spec, loss_scale=factor)

    def corrupt(self, cohort, rows, seed):
        return replace_losses(cohort, lambda v: torch.where(rows, v * self.hp.c, v))
