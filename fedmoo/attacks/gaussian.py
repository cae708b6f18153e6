"""Gaussian attack: the attacker sends a random direction of a given norm (Byzantine noise)."""

from __future__ import annotations

import numpy as np
import torch

from fedmoo.attacks.base import Attack
from fedmoo.config.hparams import attack as declared


class Gaussian(Attack):
    """The attacker sends ``norm * z / ||z||`` with ``z ~ N(0, I)`` drawn from the round's seed and
    ``attack.seed`` (losses honest); ``norm: null`` = the norm of its honest update, which defeats
    norm-based filtering."""

    name = "gaussian"
    hp: declared.Gaussian

    def corrupt(self, cohort, rows, seed):
        d = cohort.deltas
        state = np.random.SeedSequence([int(seed), self.hp.seed, 3]).generate_state(1, np.uint64)[0]
        gen = torch.Generator().manual_seed(int(state >> np.uint64(1)))
        honest = d[rows]
        z = torch.randn(honest.shape, generator=gen, dtype=torch.float64).to(d)
        flat_z = z.flatten(1).norm(dim=1)
        target = honest.flatten(1).norm(dim=1) if self.hp.norm is None else torch.full_like(flat_z, self.hp.norm)
        scale = (target / flat_z).view(-1, *(1,) * (d.dim() - 1))
        out = d.clone()
        out[rows] = z * scale
        return cohort.replace(deltas=out)
