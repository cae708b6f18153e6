"""Attacks on chosen clients, one module each: ``build(attack_cfg, federation)`` -> a bound
``Attack``. Attacks act through the runner's hooks (the sampler, before and after local
training), never inside algorithm code; docs/attacks.md."""

from __future__ import annotations

from typing import Any

from fedmoo.config import hparams
from fedmoo.attacks.base import Attack


def get(name: str) -> type[Attack]:
    """The class declared under ``name`` (UserError naming the choices when none is)."""
    return hparams.component("attack", name)


def names() -> list[str]:
    return list(hparams.options("attack"))


def create(cfg: dict[str, Any]) -> Attack:
    """Instantiate from an ``attack`` mapping ``{name: ..., <key>: ...}`` (not yet bound;
    checked against the attack's declaration)."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    return get(name)(name=name, **cfg)


def build(cfg: dict[str, Any], federation) -> Attack:
    """The attack of a run, bound to its federation (who is malicious is resolved here)."""
    classes = federation.num_classes if federation.task == "classification" else None
    return create(cfg).bind(federation.num_clients, federation.client_names, classes)


__all__ = ["Attack", "build", "create", "get", "names"]
