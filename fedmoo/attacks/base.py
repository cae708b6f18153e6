"""Base class of every attack: who is malicious, and the hooks the runner calls.

An attack never runs inside algorithm code. The runner calls, each round:
``forced_clients`` (once, for the sampler), ``client_spec(spec, ids)`` before local training (the
attacker's data or objective), and ``apply(cohort, seed)`` after it (what the attacker reports).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from fedmoo.errors import UserError
from fedmoo.state import ClientSpec, Cohort


class Attack:
    """Malicious clients chosen by ``malicious`` act on their own updates, losses or data.

    Common keys (every ``conf/attack/*.yaml``):
      malicious: who attacks. A list of client ids (``[0, 3]``), one id (``2``), a fraction of the
        clients in (0, 1] (``0.2``: ``max(1, round(0.2 N))`` clients drawn with ``seed``), or a
        client name / list of names (``phd``: the Adult PhD domain; see ``clients.csv``).
      always_participate: the attackers join every round (the sampler puts them in the cohort in
        place of random picks); default false (they are sampled like everyone else).
      seed: seeds the fractional choice of attackers (separate from the training seed).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init__(self, malicious: Any = 0.1, always_participate: bool = False, seed: int = 0):
        if not isinstance(always_participate, bool):
            raise UserError(f"attack.always_participate={always_participate!r} must be true or false")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UserError(f"attack.seed={seed!r} must be an integer")
        self.malicious = malicious
        self.always_participate = always_participate
        self.seed = seed
        self.attackers = torch.zeros(0, dtype=torch.long)
        self.mask = torch.zeros(0, dtype=torch.bool)

    # -- who is malicious ---------------------------------------------------------------------
    def bind(self, num_clients: int, client_names: list[str] | None = None,
             num_classes: int | None = None) -> Attack:
        """Resolve ``malicious`` against the federation; returns self."""
        self.num_classes = num_classes
        ids = resolve_malicious(self.malicious, num_clients, client_names, self.seed)
        self.attackers = torch.tensor(ids, dtype=torch.long)
        self.mask = torch.zeros(num_clients, dtype=torch.bool)
        self.mask[self.attackers] = True
        return self

    @property
    def forced_clients(self) -> Tensor:
        """Clients the sampler must put in every cohort."""
        return self.attackers if self.always_participate else self.attackers[:0]

    def rows(self, client_ids: Tensor) -> Tensor:
        """Bool ``[K]``: which cohort rows are attackers (on the ids' device)."""
        return self.mask[client_ids.cpu()].to(client_ids.device)

    def groups(self) -> dict[str, np.ndarray]:
        """Client masks reported as metric groups: ``benign`` always, ``attackers`` if any."""
        benign = ~self.mask.numpy()
        out = {"benign": benign}
        if self.mask.any():
            out["attackers"] = self.mask.numpy().copy()
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "attackers": self.attackers.tolist(), **self.hparams()}

    def hparams(self) -> dict[str, Any]:
        """The attack's own keys, then ``malicious``, ``always_participate``, ``seed``."""
        sig = inspect.signature(type(self).__init__)
        keys = [k for k in sig.parameters if k != "self" and hasattr(self, k)]
        keys += [k for k in ("malicious", "always_participate", "seed") if k not in keys]
        return {k: getattr(self, k) for k in keys}

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
    """Sorted attacker ids from ``attack.malicious`` (see ``Attack``)."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return _by_name(list(value), client_names)
    if isinstance(value, str):
        return _by_name([value], client_names)
    if isinstance(value, float):
        if not 0.0 < value <= 1.0 or math.isnan(value):
            raise UserError(f"attack.malicious={value} as a fraction must be in (0, 1]; "
                            "or give client ids, e.g. attack.malicious=[0,3]")
        count = max(1, round(value * num_clients))
        rng = np.random.default_rng([int(seed), 1009])
        return sorted(int(i) for i in rng.choice(num_clients, count, replace=False))
    ids = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(ids, (list, tuple)) or not ids
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        raise UserError(f"attack.malicious={value!r} is not valid; give client ids ([0,3]), a "
                        "fraction in (0, 1] (0.2) or client names (phd)")
    bad = [i for i in ids if not 0 <= i < num_clients]
    if bad:
        raise UserError(f"attack.malicious contains client {bad[0]}, but client ids run from 0 to "
                        f"{num_clients - 1}; pick ids in that range")
    if len(set(ids)) != len(ids):
        raise UserError(f"attack.malicious={list(ids)} lists a client twice; list each once")
    return sorted(ids)


def _by_name(names: list[str], client_names: list[str] | None) -> list[int]:
    if not client_names:
        raise UserError(f"attack.malicious={names[0]!r} names a client, but this dataset's clients "
                        "have no names; give client ids or a fraction instead")
    ids = []
    for n in names:
        if n not in client_names:
            shown = ", ".join(client_names[:10]) + (", ..." if len(client_names) > 10 else "")
            raise UserError(f"attack.malicious={n!r} is not a client name of this dataset; "
                            f"choose among: {shown}")
        ids.append(client_names.index(n))
    return sorted(set(ids))


def require_number(key: str, value: Any, lo: float | None = None, lo_open: bool = False) -> float:
    """Validate a numeric attack parameter (one-line UserError naming ``attack.<key>``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"attack.{key}={value!r} must be a finite number")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise UserError(f"attack.{key}={value} must be {'>' if lo_open else '>='} {lo}")
    return float(value)
