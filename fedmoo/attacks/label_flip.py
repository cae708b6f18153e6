"""Label flipping (data poisoning, e.g. Tolpegin et al., ESORICS 2020; Fung et al. 2020).

The attacker trains, honestly otherwise, on its own data with every label y replaced by pi(y).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedmoo.attacks.base import Attack
from fedmoo.errors import UserError
from fedmoo.config.hparams import attack as declared

class LabelFlip(Attack):
    """The attacker's labels go through a permutation pi of the C classes before training.

    The engine applies ``ClientSpec.label_map`` to the attacker's minibatches and to the losses it
    reports (``loss_before``, ``loss_trained``), so they are those on its poisoned data; test
    metrics use the true labels."""

    name = "label_flip"
    hp: declared.LabelFlip

    def bind(self, num_clients, client_names=None, num_classes=None):
        super().bind(num_clients, client_names, num_classes)
        if num_classes is None:
            raise UserError("attack=label_flip needs a classification dataset; choose another "
                            "attack for regression data")
        self.pi = torch.from_numpy(label_permutation(self.hp.permutation, num_classes, self.hp.seed))
        return self

    def client_spec(self, spec, client_ids):
        rows = self.rows(client_ids).cpu()
        if not bool(rows.any()):
            return spec
        label_map = torch.arange(self.pi.numel()).repeat(rows.numel(), 1) \
            if spec.label_map is None else spec.label_map.cpu().clone()
        label_map[rows] = self.pi[label_map[rows]]
        return dataclasses.replace(spec, label_map=label_map)


def label_permutation(spec, num_classes: int, seed: int) -> np.ndarray:
    """The class permutation ``pi`` as an int64 array ``[C]``."""
    c = num_classes
    if spec == "reverse":
        return np.arange(c - 1, -1, -1, dtype=np.int64)
    if spec == "shift":
        return (np.arange(c, dtype=np.int64) + 1) % c
    if spec == "random":
        return np.random.default_rng([int(seed), 2027]).permutation(c).astype(np.int64)
    if (not isinstance(spec, (list, tuple)) or len(spec) != c
            or sorted(spec) != list(range(c)) or any(isinstance(v, bool) for v in spec)):
        raise UserError(f"attack.permutation={spec!r} must be reverse, shift, random or a "
                        f"permutation of 0..{c - 1} ({c} classes)")
    return np.asarray(spec, dtype=np.int64)
