"""The components' hyperparameters, declared once: ``@declares(group, slug, impl)`` on the
dataclass of knobs (``declare(group, slug, Params, impl)``).

Every algorithm, attack, model, data source and partition names its hyperparameters in a
dataclass of knobs (``fedmoo.config.knobs.knob``), in a torch-free module of this package (one per
group), so a run's config is checked before torch is imported. ``store`` puts each declaration in
Hydra's ConfigStore as ``hparams/<group>/<slug>``, which an option's YAML file may extend
(``- /hparams/algo/fedmgda@_here_``), so Hydra refuses a key the component does not have;
``check`` refuses a value the declaration does not allow; ``resolve`` fills in the defaults.
A plugin declares its components the same way, in any module of its package, beside their code:
fedmoo imports a declared plugin's modules when it reads a config (docs/plugins.md).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import pkgutil
from pathlib import Path
from typing import Any, Callable, dataclass_transform

from fedmoo.errors import UserError
from fedmoo.config.knobs import Knob, integer, of, refusal

GROUPS = ("algo", "attack", "model", "data", "partition")
NOTES = ("name", "description")   # keys every option may hold besides its knobs

_DECLARED: dict[tuple[str, str], Declaration] = {}
_LOADED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Declaration:
    """A component: its implementation (``impl``: ``"module:attr"``, or the object itself for
    one declared from Python), its one-line ``description`` and its hyperparameters, the knobs
    of dataclass ``params`` with ``defaults`` changed (a preset), and ``params.refuse(values)``
    (if it has one: what its keys must be together, a line saying what is wrong or None)."""

    group: str
    slug: str
    params: type
    impl: Any
    description: str = ""
    defaults: tuple[tuple[str, Any], ...] = ()

    @functools.cached_property
    def knobs(self) -> tuple[Knob, ...]:
        changed = dict(self.defaults)
        return tuple(dataclasses.replace(k, default=changed[k.leaf])
                     if k.leaf in changed else k
                     for k in of(self.params, f"{self.group}."))

    def node(self) -> dict[str, Any]:
        """The option's values for Hydra: ``name`` and each knob's default (lists as lists)."""
        return {"name": self.slug,
                **{k.leaf: list(k.default) if isinstance(k.default, tuple)
                   else k.default for k in self.knobs}}

    @property
    def package(self) -> str:
        """The top-level package of the implementation (``fedmoo``, or a plugin's)."""
        where = self.impl if isinstance(self.impl, str) else getattr(self.impl, "__module__", "")
        return (where or "fedmoo").split(".")[0].split(":")[0]

    def load(self) -> Any:
        """The implementation (imported on first use: it may import torch)."""
        if not isinstance(self.impl, str):
            return self.impl
        module, _, attr = self.impl.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, SystemExit) as e:   # a plugin's, named
            raise UserError(f"{self.group}={self.slug}: its implementation {self.impl} cannot "
                            f"be loaded ({type(e).__name__}: {e}); install its package or put "
                            "its folder on PYTHONPATH") from None


@dataclasses.dataclass
class NoKnobs:
    """The hyperparameters of a component that has none."""


def declare(group: str, slug: str, params: type, impl: Any, description: str = "",
            **defaults: Any) -> Declaration:
    """File component ``slug`` of ``group`` (the option ``group=slug``: no YAML file needed):
    ``impl`` (``"module:attr"``, imported when a run needs it), the line ``fedmoo list`` shows
    and ``params``, a dataclass of knobs; ``defaults`` makes a preset (``fedmgda_plus``)."""
    if group not in GROUPS:
        raise ValueError(f"group {group!r} is not one of {GROUPS}")
    if (group, slug) in _DECLARED:
        raise RuntimeError(f"{group} {slug!r} is declared twice")
    unknown = sorted(set(defaults) - {f.name for f in dataclasses.fields(params)})
    if unknown:
        raise ValueError(f"{params.__name__} has no knob {unknown[0]!r}")
    base = _base(group)
    if base is not None and not issubclass(params, base):
        raise TypeError(f"{params.__name__} declares {group} {slug!r} but does not extend "
                        f"{base.__module__}.{base.__name__} (the keys every {group} has)")
    out = Declaration(group, slug, params, impl, " ".join(description.split()),
                      tuple(defaults.items()))
    for k in out.knobs:                  # a preset's own defaults must be values it allows
        if k.leaf in defaults and refusal(k, k.default):
            raise ValueError(f"{group} {slug!r}: default {refusal(k, k.default)}")
    _DECLARED[(group, slug)] = out
    if out.package != "fedmoo":          # a package that declares (imported in Python, for
        from fedmoo.config import plugins       # fedmoo.api) counts as a plugin

        plugins.note_registered(out.package)
    return out


@dataclass_transform()
def declares(group: str, slug: str, impl: Any, description: str = "",
             **defaults: Any) -> Callable[[type], type]:
    """``declare`` as a decorator of the class of knobs it names, which it makes a dataclass
    (stacked: one declaration each, e.g. presets)."""
    def filed(params: type) -> type:
        if "__dataclass_fields__" not in vars(params):
            params = dataclasses.dataclass(params)
        declare(group, slug, params, impl, description, **defaults)
        return params
    return filed


# the dataclass a group's declarations extend: the keys the runner reads of every component
BASES = {"attack": "fedmoo.config.hparams.attack:Common",
         "partition": "fedmoo.config.hparams.partition:Partition"}


def _base(group: str) -> type | None:
    if group not in BASES:
        return None
    module, name = BASES[group].split(":")
    return getattr(importlib.import_module(module), name)


def _load() -> None:
    """Import this package's declaration modules, then each plugin's modules."""
    if "fedmoo" not in _LOADED:
        _LOADED.add("fedmoo")
        for mod in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{mod.name}")
    from fedmoo.config import plugins

    for name in plugins.names():
        if name not in _LOADED:
            _LOADED.add(name)
            _load_plugin(name)


def _load_plugin(name: str) -> None:
    """Import plugin ``name`` and, if it is a package, each of its modules but those named
    ``_*``: their ``declare`` calls file its components."""
    module = name
    try:
        package = importlib.import_module(module)
        for found in pkgutil.iter_modules(getattr(package, "__path__", [])):
            if not found.name.startswith("_"):
                module = f"{name}.{found.name}"
                importlib.import_module(module)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's code is the user's to fix
        raise UserError(f"plugin {name!r}: importing {module} failed ({type(e).__name__}: "
                        f"{e}); a plugin's modules must import without error or exit (docs/plugins.md)") from None


def declared(group: str, slug: str) -> Declaration | None:
    """The declaration of ``group``'s component ``slug``, None when none is filed."""
    if (group, slug) not in _DECLARED:
        _load()
    return _DECLARED.get((group, slug))


def all_declared() -> dict[tuple[str, str], Declaration]:
    _load()
    return dict(_DECLARED)


def options(group: str) -> dict[str, str]:
    """``{slug: description}`` of every component declared in ``group`` (plugins' included)."""
    return {slug: d.description for (g, slug), d in sorted(all_declared().items()) if g == group}


def component(group: str, slug: Any) -> Any:
    """The implementation of ``group=slug`` (a class, or a data source's loader function);
    UserError naming the choices when nothing is declared under ``slug``."""
    found = declared(group, slug) if isinstance(slug, str) else None
    if found is None:
        raise UserError(f"unknown {group} {slug!r}; choose one of: {', '.join(options(group))}")
    return found.load()


def knobs(group: str, slug: str) -> tuple[Knob, ...]:
    """The knobs of a declared component (keys ``<group>.<knob>``); () when it has none."""
    found = declared(group, slug)
    return () if found is None else found.knobs


def check(group: str, section: dict[str, Any]) -> None:
    """Refuse (UserError, one line) a section ``{name: slug, <knob>: value, ...}`` with a key
    its component does not declare, a value a knob refuses, or keys that do not go together
    (the declaration's ``refuse(values)``)."""
    slug = section.get("name")
    if not isinstance(slug, str):
        return
    found = declared(group, slug)
    ks = {k.leaf: k for k in (found.knobs if found is not None else ())}
    unknown = [key for key in section if key not in ks and key not in NOTES]
    if unknown and found is None:
        raise UserError(f"unknown {group} {slug!r}; choose one of: {', '.join(options(group))} "
                        "(a plugin declares its own: docs/plugins.md)")
    if unknown:
        valid = ", ".join(ks) or "(none)"
        raise UserError(f"{group}.{unknown[0]} is not a hyperparameter of {group}={slug}; "
                        f"valid keys: {valid}")
    for key, value in section.items():
        if key in ks:
            msg = refusal(ks[key], value)
            if msg:
                raise UserError(msg + f" (for {group}={slug})")
    whole = getattr(found.params, "refuse", None) if found is not None else None  # keys together
    msg = whole and whole({**{key: k.default for key, k in ks.items()}, **section})
    if msg:
        raise UserError(msg + f" (for {group}={slug})")


def resolve(group: str, slug: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` checked (``check``) and completed with the declared defaults, an integer given
    for a float knob made a float: the values a component built from Python works with."""
    check(group, {"name": slug, **given})
    out = {}
    for k in knobs(group, slug):
        key = k.leaf
        value = given.get(key, copy.deepcopy(k.default))   # a list default is the caller's own
        if (k.rule.kind or k.type) is float and integer(value):
            value = float(value)
        out[key] = value
    return out


def make(group: str, slug: str, given: dict[str, Any]) -> Any:
    """``slug``'s declared dataclass holding ``given`` (``resolve``d: checked, defaults filled):
    the typed hyperparameters a component reads (``self.hp.eta``)."""
    values = resolve(group, slug, given)
    return declared(group, slug).params(**values)


def values(hp: Any) -> dict[str, Any]:
    """The values a ``make`` object holds: its own keys, then those every component of its group
    has (an attack's ``malicious``, ...)."""
    bases = [_base(group) for group in BASES]
    common = [f.name for c in type(hp).__mro__[1:] if c in bases for f in dataclasses.fields(c)]
    keys = [f.name for f in dataclasses.fields(hp)]
    return {k: getattr(hp, k) for k in [*(k for k in keys if k not in common), *common]}


def store() -> None:
    """Put every declaration in Hydra's ConfigStore as ``hparams/<group>/<slug>`` and, unless a
    YAML option of that name extends it, as the option ``<group>/<slug>``: as a mapping, not the
    dataclass (a structured node costs OmegaConf about 4 ms: 0.3 s of every start-up)."""
    from hydra.core.config_store import ConfigStore

    from fedmoo.config import plugins

    cs = ConfigStore.instance()
    folders = [Path(__file__).resolve().parents[2] / "conf", *(d for _, d in plugins.conf_dirs())]
    for (group, slug), found in all_declared().items():
        node = found.node()
        cs.store(group=f"hparams/{group}", name=slug, node=node)   # what a YAML option extends
        if not any((f / group / f"{slug}.yaml").is_file() for f in folders):
            cs.store(group=group, name=slug, node=node)  # the option ``group=slug`` itself
            # (beside a YAML of that name Hydra would take it as the YAML's schema)
