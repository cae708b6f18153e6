"""Loss-scaling attack (FedMGDA+, Hu et al. 2022, Sec. 6.2): the attacker trains on c * loss."""

from __future__ import annotations

import dataclasses

import torch

from fedmoo.attacks.base import Attack
from fedmoo.config.hparams import attack as declared


class LossScaling(Attack):
    """Multiplicative loss inflation: the attacker's local objective is ``c * f_k``.

    Before training it sets the engine's ``ClientSpec.loss_scale`` to c on its rows (so its
    gradients, hence its update, scale by c: exactly c for one full-batch step, about c for small
    steps), and it reports ``c * loss_before``, ``c * loss_after`` (and ``c * loss_trained`` when
    asked for). Gradient normalisation
    (FedMGDA+, FedAvg-n) removes the effect on the update direction.

    Hyperparameters: c (> 0, the factor; 1 = honest).
    """

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
        changes = {}
        for name in ("loss_before", "loss_after", "loss_trained"):
            v = getattr(cohort, name)
            if v is not None:
                changes[name] = torch.where(rows, v * self.hp.c, v)
        return cohort.replace(**changes)
