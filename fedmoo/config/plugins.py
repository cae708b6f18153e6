"""Plugins: a researcher's own algorithms, models, attacks, data sources and config files, kept in
their own package and used through the normal CLI (docs/plugins.md).

A plugin is a package named by a ``fedmoo.plugins`` entry point, or by ``FEDMOO_PLUGINS``
(comma-separated names) when its folder holds the empty marker file ``fedmoo-plugin`` (so the
variable cannot turn ``os`` into a plugin; found without importing anything), or one that
declared a component in this process from Python (``note_registered``). Its modules declare
its components (fedmoo.config.hparams imports them), its ``conf/`` folder joins the config
search path, and its modules are
the only foreign ``_target_`` prefixes Hydra may instantiate. Imports only fedmoo.errors.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

from fedmoo.errors import UserError

ENV = "FEDMOO_PLUGINS"
GROUP = "fedmoo.plugins"
MARKER = "fedmoo-plugin"        # the empty file that declares a FEDMOO_PLUGINS package


def names() -> list[str]:
    """Declared plugin packages, entry points first, without duplicates. A ``FEDMOO_PLUGINS``
    name that is not a package with the marker file is refused (UserError)."""
    from importlib.metadata import entry_points

    found = [ep.value.split(":")[0].strip() for ep in entry_points(group=GROUP)]
    for name in (n.strip() for n in os.environ.get(ENV, "").split(",")):
        if name and name not in found:
            _check_declared(name)
            found.append(name)
    return list(dict.fromkeys(found + list(_registered)))


def _not_importable(name: str) -> UserError:
    return UserError(f"plugin {name!r} (from {ENV} or a {GROUP} entry point) is not "
                     "importable; install it or put its folder on PYTHONPATH")


def _check_declared(name: str) -> None:
    """``name`` is a package on ``sys.path`` whose folder holds the marker file; found without
    importing it or its parents (``importlib.util.find_spec`` would import ``a`` for ``a.b``)."""
    from importlib.machinery import PathFinder

    folders, spec = None, None
    for part in name.split("."):
        try:
            spec = PathFinder.find_spec(part, folders)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            break
        folders = spec.submodule_search_locations
        if folders is None:
            break
    if spec is None and ("." in name or importlib.util.find_spec(name) is None):
        raise _not_importable(name)      # (a built-in module such as sys is not a plugin)
    if spec is not None and folders and any((Path(f) / MARKER).is_file() for f in folders):
        return
    where = f" ({', '.join(str(f) for f in folders)})" if spec is not None and folders else ""
    raise UserError(f"{ENV} names {name!r}, which is not a fedmoo plugin: a plugin is a package "
                    f"that declares itself with an empty file named {MARKER} in its folder"
                    f"{where} or with a {GROUP} entry point (docs/plugins.md)")


# Packages that registered a component in this process (fedmoo.api users import their own
# project, then call fedmoo.api.run): they count as declared plugins.
_registered: dict[str, None] = {}


def note_registered(module: str) -> None:
    """A component was registered from ``module`` (its ``__module__``): the top-level package
    counts as a plugin from now on (its conf folder joins the config search path, its
    ``_target_`` prefixes are allowed), unless it is fedmoo itself or a script (``__main__``)."""
    top = str(module).split(".")[0]
    if top and top not in ("fedmoo", "__main__", "builtins"):
        _registered[top] = None


def package_dir(name: str) -> Path | None:
    """The folder of plugin package ``name`` (found without importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise _not_importable(name)
    return next((Path(b) for b in spec.submodule_search_locations or []), None)


def conf_dirs() -> list[tuple[str, Path]]:
    """(plugin, ``<package>/conf``) of every declared plugin that has one."""
    return [(n, d / "conf") for n in names()
            if (d := package_dir(n)) is not None and (d / "conf").is_dir()]


def search_path() -> list[str]:
    """Hydra search-path entries of the plugins' conf folders."""
    return [d.resolve().as_uri() for _, d in conf_dirs()]
