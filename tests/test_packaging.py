"""pyproject.toml tells the truth: what fedmoo imports is declared, what is declared is used, the
version is written once, the package patterns match packages, CITATION.cff is well-formed."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import yaml

import fedmoo

ROOT = Path(__file__).resolve().parents[1]
try:
    import tomllib
except ImportError:                                   # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs Python 3.11 "
                                  "(tomllib) or tomli")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# distribution -> the module it is imported as, when the names differ
MODULE = {"hydra-core": "hydra", "scikit-learn": "sklearn", "pyyaml": "yaml", "pillow": "PIL",
          "flwr": "flwr", "mlflow-skinny": "mlflow"}
# declared but never imported: qpsolvers' solver backends (qpsolvers imports them)
BACKENDS = {"daqp", "quadprog"}


def dist(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


def third_party_imports() -> set[str]:
    found = set()
    for path in (ROOT / "fedmoo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "fedmoo"}


def test_imports_are_declared_and_declarations_are_imported():
    base = {dist(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {dist(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values()
              for r in reqs}
    declared = {MODULE.get(d, d.replace("-", "_")) for d in base | extras}
    imported = third_party_imports()
    assert imported <= declared, f"imported but not declared: {sorted(imported - declared)}"
    unused = {d for d in base if MODULE.get(d, d.replace("-", "_")) not in imported}
    assert unused <= BACKENDS, f"declared but never imported: {sorted(unused - BACKENDS)}"


def test_version_is_written_once():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fedmoo.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", fedmoo.__version__)
    try:
        installed = importlib.metadata.version("fedmoo")
    except importlib.metadata.PackageNotFoundError:
        return
    assert installed == fedmoo.__version__


# Namespace packages shared with other distributions: no __init__.py of their own, only
# subpackages (Hydra finds launchers only under hydra_plugins).
NAMESPACES = {"hydra_plugins"}


def test_package_patterns_match_packages_and_typed_marker_ships():
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in find:
        top = pattern.rstrip("*")
        if top in NAMESPACES:
            assert not (ROOT / top / "__init__.py").exists(), f"{top} must stay a namespace"
            assert list((ROOT / top).glob("*/__init__.py")), f"{pattern} names no package"
            continue
        assert (ROOT / top / "__init__.py").is_file(), f"{pattern} names no package"
    assert (ROOT / "fedmoo" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["fedmoo"]


def test_citation_file():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["message"] and cff["title"].startswith("fedmoo")
    assert cff["authors"] and "version" not in cff     # no second copy of the version
    for ref in cff["references"]:
        assert ref["title"] and ref["authors"] and ref["year"] > 2000


def test_trackers_extra_covers_mlflows_sqlite_store():
    """logger=mlflow's default store is SQLite; mlflow-skinny does not require what that store
    imports (SQLAlchemy, alembic), so `.[trackers]` must, or it works only next to `.[flower]`."""
    pytest.importorskip("mlflow")
    import importlib.util

    source = Path(importlib.util.find_spec("mlflow.store.db.utils").origin).read_text()
    imported = set()
    for node in ast.parse(source).body:                 # the module's top-level imports
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    third = {m for m in imported if m not in sys.stdlib_module_names and m != "mlflow"}
    assert {"sqlalchemy", "alembic"} <= third
    owners = importlib.metadata.packages_distributions()
    skinny = {dist(r) for r in importlib.metadata.requires("mlflow-skinny") or []
              if "extra ==" not in r}
    trackers = {dist(r) for r in PYPROJECT["project"]["optional-dependencies"]["trackers"]}
    for module in third:
        assert {d.lower() for d in owners[module]} & (skinny | trackers), module
