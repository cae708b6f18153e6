"""Server rules. Each is declared once, in ``fedmoo.config.hparams.algo`` (a plugin's beside its
code): its slug, description, hyperparameters and the class that implements it."""

from __future__ import annotations

from typing import Any

from fedmoo.config import hparams
from fedmoo.algorithms.base import Algorithm


def get(name: str) -> type[Algorithm]:
    """The class declared under ``name`` (UserError naming the choices when none is)."""
    return hparams.component("algo", name)


def names() -> list[str]:
    return list(hparams.options("algo"))


def build(cfg: dict[str, Any], rounds: int | None = None) -> Algorithm:
    """Instantiate from an ``algo`` config mapping: ``{name: ..., <hyperparameter>: ...}``
    (checked against the rule's declaration), for a run of ``rounds`` rounds."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    return get(name)(name=name, rounds=rounds, **cfg)


__all__ = ["Algorithm", "build", "get", "names"]
