"""Base class of every attack: who is malicious, and the hooks the runner calls.

An attack never runs inside algorithm code. The runner calls, each round:
``forced_clients`` (once, for the sampler), ``client_spec(spec, ids)`` before local training (the
attacker's data or objective), and ``apply(cohort, seed)`` after it (what the attacker reports).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from fedmoo.config import hparams as declarations
from fedmoo.errors import UserError
from fedmoo.state import ClientSpec, Cohort


class Attack:
    """Malicious clients chosen by ``malicious`` act on their own updates, losses or data.

    Every attack takes the common keys ``malicious`` (client ids, one id, a fraction of the clients
    drawn with ``seed``, or client names), ``always_participate`` and ``seed``, besides its own,
    declared in ``fedmoo.config.hparams.attack`` (a plugin's: beside its code); ``hp``
    holds them as the declared dataclass (``SignFlip(scale=2.0).hp.scale``)."""

    name: ClassVar[str] = ""
    hp: Any          # the declared dataclass (extending hparams.attack.Common), filled

    def __init__(self, name: str | None = None, **hyperparameters: Any):
        self.name = name or type(self).name    # type: ignore[misc]
        if declarations.declared("attack", self.name) is None:
            raise UserError(f"attack={self.name} declares no hyperparameters (malicious, ...): "
                            "its package must declare them with fedmoo.config.hparams."
                            "declare (docs/plugins.md)")
        self.hp = declarations.make("attack", self.name, hyperparameters)

    # -- who is malicious ---------------------------------------------------------------------
    def bind(self, num_clients: int, client_names: list[str] | None = None,
             num_classes: int | None = None) -> Attack:
        """Resolve ``malicious`` against the federation; returns self."""
        ids = resolve_malicious(self.hp.malicious, num_clients, client_names, self.hp.seed)
        self.attackers = torch.tensor(ids, dtype=torch.long)
        self.mask = torch.zeros(num_clients, dtype=torch.bool)
        self.mask[self.attackers] = True
        return self

    @property
    def forced_clients(self) -> Tensor:
        """Clients the sampler must put in every cohort."""
        return self.attackers if self.hp.always_participate else self.attackers[:0]

    def rows(self, client_ids: Tensor) -> Tensor:
        """Bool ``[K]``: which cohort rows are attackers (on the ids' device)."""
        return self.mask[client_ids.cpu()].to(client_ids.device)

    def groups(self) -> dict[str, np.ndarray]:
        """Client masks reported as metric groups: ``benign`` always, ``attackers`` if any."""
        out = {"benign": ~self.mask.numpy()}
        if self.mask.any():
            out["attackers"] = self.mask.numpy().copy()
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "attackers": self.attackers.tolist(), **self.hparams()}

    def hparams(self) -> dict[str, Any]:
        """The attack's own keys, then ``malicious``, ``always_participate``, ``seed``."""
        return declarations.values(self.hp)

    # -- the round hooks ----------------------------------------------------------------------
    def client_spec(self, spec: ClientSpec, client_ids: Tensor) -> ClientSpec:
        """Change what the attackers train on (their data or objective); default: nothing."""
        return spec

    def apply(self, cohort: Cohort, seed: int) -> Cohort:
        """The cohort as reported to the server; ``seed`` is the round's seed."""
        rows = self.rows(cohort.client_ids)
        if not bool(rows.any()):
            return cohort
        return self.corrupt(cohort, rows, seed)

    def corrupt(self, cohort: Cohort, rows: Tensor, seed: int) -> Cohort:
        """Change the attackers' rows (``rows`` bool ``[K]``); default: report honestly."""
        return cohort


def resolve_malicious(value: Any, num_clients: int, client_names: list[str] | None,
                      seed: int) -> list[int]:
    """Sorted attacker ids from ``attack.malicious`` (a value its declaration allows: a fraction,
    or ids or names, one or a list)."""
    if value is None:                  # attack=none's nobody
        return []
    if isinstance(value, float):
        count = max(1, round(value * num_clients))
        rng = np.random.default_rng([int(seed), 1009])
        return sorted(int(i) for i in rng.choice(num_clients, count, replace=False))
    given = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(given[0], str):
        if not client_names:
            raise UserError(f"attack.malicious={given[0]!r} names a client, but this dataset's "
                            "clients have no names; give client ids or a fraction instead")
        for n in given:
            if n not in client_names:
                shown = ", ".join(client_names[:10]) + (", ..." if len(client_names) > 10 else "")
                raise UserError(f"attack.malicious={n!r} is not a client name of this dataset; "
                                f"choose among: {shown}")
        return sorted({client_names.index(n) for n in given})
    bad = [i for i in given if not 0 <= i < num_clients]
    if bad:
        raise UserError(f"attack.malicious contains client {bad[0]}, but client ids run from 0 to "
                        f"{num_clients - 1}; pick ids in that range")
    return sorted(given)


LOSSES = ("loss_before", "loss_after", "loss_trained")   # the losses a cohort may report


def replace_losses(cohort: Cohort, change) -> Cohort:
    """The cohort with ``change(v)`` in place of every reported loss ``v`` it carries."""
    return cohort.replace(**{n: change(v) for n in LOSSES if (v := getattr(cohort, n)) is not None})


def scale_rows(deltas: Tensor, rows: Tensor, factor: float) -> Tensor:
    """A copy of ``deltas [K, ...]`` with the rows where ``rows`` is true multiplied by ``factor``."""
    out = deltas.clone()
    out[rows] = deltas[rows] * factor
    return out
