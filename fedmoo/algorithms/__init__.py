"""Algorithm registry: ``get(name)`` returns the class registered under that slug."""

from __future__ import annotations

import importlib
from typing import Any

from fedmoo.algorithms.base import Algorithm
from fedmoo.errors import UserError

# One module per algorithm family; each module registers its public names.
_MODULES = ["fedavg", "fedprox", "qfedavg", "afl", "fedmgda", "fedfv", "adafed", "term", "ditto",
            "fedfa", "robust", "fmgda"]

_REGISTRY: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"algorithm name {cls.name!r} is empty or registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    if not _REGISTRY:
        for mod in _MODULES:
            importlib.import_module(f"fedmoo.algorithms.{mod}")


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
    """Instantiate from an ``algo`` config mapping: ``{name: ..., <hyperparameter>: ...}``."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    cls = get(name)
    import inspect

    allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = [k for k in cfg if k not in allowed]
    if unknown:
        raise UserError(
            f"algo.{unknown[0]} is not a hyperparameter of {name}; valid keys: {', '.join(allowed)}"
        )
    return cls(**cfg)


__all__ = ["Algorithm", "build", "get", "names", "register"]
