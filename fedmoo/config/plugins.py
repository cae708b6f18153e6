"""Plugins: a researcher's own algorithms, models, attacks, data sources and config files, kept in
their own package and used through the normal CLI (docs/plugins.md).

A plugin is an importable Python package. fedmoo finds plugins in two places:

- the ``fedmoo.plugins`` entry-point group of installed distributions
  (``[project.entry-points."fedmoo.plugins"] myproj = "myproj"`` in the plugin's pyproject.toml);
- the ``FEDMOO_PLUGINS`` environment variable: comma-separated package names (handy for a
  project that is on ``PYTHONPATH`` but not installed). Such a package declares itself with an
  empty file named ``fedmoo-plugin`` in its folder (as ``py.typed`` declares type hints): the
  variable chooses among declared plugins, it cannot turn any module (``os``, ``json``) into one.
  The marker is looked up on ``sys.path`` without importing anything;
- in Python, a package that declared a component in this process with the implementation
  itself (``import myproj`` before ``fedmoo.api.run``): ``declare`` tells ``note_registered``.

A plugin declares its components in ``<package>/hparams.py`` (``fedmoo.config.hparams.declare``:
slug, description, hyperparameters and the ``"module:attr"`` that implements each), which fedmoo reads
without importing the package; an implementation is imported when a run uses it. Its
``conf/`` folder, if any, joins fedmoo's config search path, so ``algo=myavg`` finds
``myproj/conf/algo/myavg.yaml`` and ``experiment=myproj/demo`` finds an experiment file. The
plugin's modules are also the only foreign ``_target_`` prefixes Hydra may instantiate.

This module imports only fedmoo.errors: every layer may ask it which plugins exist.
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


def conf_dir(name: str) -> Path | None:
    """``<package>/conf`` of plugin ``name`` when it has one (found without importing it)."""
    folder = package_dir(name)
    return folder / "conf" if folder is not None and (folder / "conf").is_dir() else None


def conf_dirs() -> list[tuple[str, Path]]:
    """(plugin, conf folder) of every declared plugin that has one."""
    return [(n, d) for n in names() if (d := conf_dir(n)) is not None]


def search_path() -> list[str]:
    """Hydra search-path entries of the plugins' conf folders."""
    return [d.resolve().as_uri() for _, d in conf_dirs()]
