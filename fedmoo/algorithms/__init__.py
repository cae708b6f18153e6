"""Algorithm registry: ``get(name)`` returns the class registered under that slug.

Every module of this package registers its classes with ``@register`` when imported; ``_load``
imports them all (no central list) and then the declared plugins (``fedmoo.plugins``), whose
modules register theirs the same way."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from fedmoo.algorithms.base import Algorithm
from fedmoo.errors import UserError

_REGISTRY: dict[str, type[Algorithm]] = {}
_LOADED = False


def register(cls: type[Algorithm]) -> type[Algorithm]:
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"algorithm name {cls.name!r} is empty or registered twice")
    _REGISTRY[cls.name] = cls
    from fedmoo import plugins

    plugins.note_registered(cls.__module__)   # a package imported in Python counts as a plugin
    return cls


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "base":
            importlib.import_module(f"{__name__}.{mod.name}")
    from fedmoo import plugins

    plugins.load_all()


def names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> type[Algorithm]:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown algo {name!r}; choose one of: {', '.join(names())}") from None


def build(cfg: dict[str, Any]) -> Algorithm:
    """Instantiate from an ``algo`` config mapping: ``{name: ..., <hyperparameter>: ...}``
    (checked against the rule's declaration, fedmoo.hparams)."""
    cfg = dict(cfg)      # a ``description`` note is no hyperparameter: the constructor skips it
    return get(cfg.pop("name", None))(**cfg)


__all__ = ["Algorithm", "build", "get", "names", "register"]
