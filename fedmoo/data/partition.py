"""Client partitions of a dataset.

A partitioner maps the labels of a sample pool to one index array per client. Partitions are
seeded by ``partition.seed`` (separate from the training seed) and saved with the run.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fedmoo.errors import UserError

Partitioner = Callable[..., list[np.ndarray]]
_PARTITIONERS: dict[str, Partitioner] = {}


def partitioner(name: str):
    def deco(fn: Partitioner) -> Partitioner:
        _PARTITIONERS[name] = fn
        return fn

    return deco


def get(name: str) -> Partitioner:
    try:
        return _PARTITIONERS[name]
    except KeyError:
        raise UserError(
            f"unknown partition {name!r}; choose one of: {', '.join(sorted(_PARTITIONERS))}"
        ) from None


def names() -> list[str]:
    return sorted(_PARTITIONERS)


@partitioner("iid")
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random, equal-size (up to one sample) split of the pool."""
    if len(labels) < num_clients:
        raise UserError(
            f"partition=iid cannot give {num_clients} clients a sample each from {len(labels)} "
            "samples; lower num_clients"
        )
    return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)]


def split_fractions(parts: list[np.ndarray], fractions: tuple[float, float, float],
                    rng: np.random.Generator) -> tuple[list[np.ndarray], ...]:
    """Shuffle each client's samples and cut them into train / val / test by fractions.

    Boundaries are ``int(f_train n)`` and ``int((f_train + f_val) n)`` as in the reference codes.
    """
    tr, va, te = [], [], []
    for p in parts:
        p = rng.permutation(p)
        n = len(p)
        a = int(fractions[0] * n)
        b = int((fractions[0] + fractions[1]) * n)
        tr.append(p[:a])
        va.append(p[a:b])
        te.append(p[b:])
    return tr, va, te
