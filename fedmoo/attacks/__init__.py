"""Attacks on chosen clients. ``build(attack_cfg, federation)`` -> a bound ``Attack``.

Attacks act on the Cohort (or on the attacker's data/objective), never inside algorithm code:
``forced_clients`` (the sampler), ``client_spec(spec, ids)`` (before local training) and
``apply(cohort, seed)`` (after it). One module per attack; docs/attacks.md.
"""

from __future__ import annotations

from typing import Any

from fedmoo.attacks.base import Attack
from fedmoo.attacks.bias import Bias
from fedmoo.attacks.gaussian import Gaussian
from fedmoo.attacks.label_flip import LabelFlip
from fedmoo.attacks.loss_scaling import LossScaling
from fedmoo.attacks.model_replacement import ModelReplacement
from fedmoo.attacks.none import NoAttack
from fedmoo.attacks.sign_flip import SignFlip
from fedmoo.attacks.update_scaling import UpdateScaling
from fedmoo.attacks.zero_update import ZeroUpdate
from fedmoo.errors import UserError

ATTACKS: dict[str, type[Attack]] = {
    cls.name: cls
    for cls in (NoAttack, Bias, LossScaling, UpdateScaling, SignFlip, Gaussian, ZeroUpdate,
                ModelReplacement, LabelFlip)
}


def register(cls: type[Attack]) -> type[Attack]:
    """Add an attack class (a plugin's), under ``cls.name``."""
    if not cls.name or cls.name in ATTACKS:
        raise RuntimeError(f"attack name {cls.name!r} is empty or registered twice")
    ATTACKS[cls.name] = cls
    from fedmoo import plugins

    plugins.note_registered(cls.__module__)   # a package imported in Python counts as a plugin
    return cls


def names() -> list[str]:
    from fedmoo import plugins

    plugins.load_all()
    return sorted(ATTACKS)


def get(name: str) -> type[Attack]:
    if name not in ATTACKS:
        names()                               # a plugin's attack registers on import
    if name not in ATTACKS:
        raise UserError(f"unknown attack {name!r}; choose one of: {', '.join(names())}")
    return ATTACKS[name]


def create(cfg: dict[str, Any]) -> Attack:
    """Instantiate from an ``attack`` mapping ``{name: ..., <key>: ...}`` (not yet bound;
    checked against the attack's declaration, fedmoo.hparams)."""
    cfg = dict(cfg)      # a ``description`` note is no hyperparameter: the constructor skips it
    return get(cfg.pop("name", None))(**cfg)


def build(cfg: dict[str, Any], federation) -> Attack:
    """The attack of a run, bound to its federation (who is malicious is resolved here)."""
    classes = federation.num_classes if federation.task == "classification" else None
    return create(cfg).bind(federation.num_clients, federation.client_names, classes)


__all__ = ["ATTACKS", "Attack", "build", "create", "get", "names", "register"]
