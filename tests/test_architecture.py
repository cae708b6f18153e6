"""The layering of docs/architecture.md, checked from the source: imports only go down, and
no module imports itself back through others (function-level imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "fedmoo"
CONFIG = {"config.knobs", "config.plugins", "config.hparams", "config.schema"}
CONTRACTS = {"state", "params", "errors", "logs", "budget"} | CONFIG
# unit -> the units it may import (besides itself and the root ``fedmoo`` for __version__)
MAY_IMPORT = {
    "cli": {"run", "report", "engine", "algorithms", "attacks", "data", "models", "moo"} | CONTRACTS,
    "run": {"report", "engine", "algorithms", "attacks", "data", "models", "moo"} | CONTRACTS,
    "flower": {"engine", "algorithms", "data", "models", "moo"} | CONTRACTS,
    "engine": {"data", "models"} | CONTRACTS,
    "algorithms": {"moo"} | CONTRACTS,
    "attacks": CONTRACTS,
    "data": CONTRACTS,
    "models": CONTRACTS,
    "report": CONTRACTS,
    "moo": set(),
    "state": set(), "params": set(), "errors": set(), "logs": set(),
    "budget": {"errors"},
    # the config contracts (fedmoo/config/), each built on the ones before it
    "config.knobs": set(), "config.plugins": {"errors"},
    "config.hparams": {"errors", "config.knobs", "config.plugins"},
    "config.schema": {"errors", "config.knobs", "config.hparams"}, "config": set(),
    "__main__": {"cli"},
    "api": {"cli", "run", "report", "engine", "algorithms", "attacks", "data", "models", "moo"}
    | CONTRACTS,
}


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """fedmoo modules that ``name`` imports anywhere in its file (``from pkg import mod`` counts
    as importing ``pkg.mod``)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "fedmoo"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([node.module] if node.module else []))
            if base.split(".")[0] != "fedmoo":
                continue
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return out


def unit(module: str) -> str:
    parts = module.split(".")
    if parts[1:2] == ["config"] and len(parts) > 2:
        return f"config.{parts[2]}"
    return parts[1] if len(parts) > 1 else "fedmoo"


def test_the_root_holds_six_modules():
    assert sorted(p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__")) \
        == ["api", "budget", "errors", "logs", "params", "state"]


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, set(mods)) & set(mods) - {m} for m, p in mods.items()}


def test_every_unit_has_a_layer():
    assert {unit(m) for m in modules()} - {"fedmoo", "conf"} <= set(MAY_IMPORT)


def test_imports_only_go_down():
    bad = []
    for mod, deps in graph().items():
        u = unit(mod)
        if u in ("fedmoo", "conf"):
            continue
        for dep in deps:
            d = unit(dep)
            if d not in (u, "fedmoo") and d not in MAY_IMPORT[u]:
                bad.append(f"{mod} imports {dep}")
    assert not bad, "\n".join(sorted(bad))


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert not cycles(graph())


def test_cycle_finder():
    # the old cli circle: cli -> describe -> cli, and prepare -> cli
    g = {"cli": {"describe", "prepare"}, "describe": {"cli"}, "prepare": {"config"}, "config": set()}
    assert cycles(g) == [["cli", "describe"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_checker_sees_a_violation(tmp_path):
    # the AST reader resolves relative and `from pkg import module` imports
    p = tmp_path / "m.py"
    p.write_text("from fedmoo.run import loop\nfrom . import errors\nimport fedmoo.cli.main\n")
    got = imports("fedmoo.data.m", p, {"fedmoo.run.loop", "fedmoo.data.errors",
                                        "fedmoo.cli.main"})
    assert got == {"fedmoo.run.loop", "fedmoo.data.errors", "fedmoo.cli.main"}


def test_no_file_points_outside_the_repository():
    """Docs, configs and code never refer to the development machine's files: no path into a
    sibling ``shared`` folder, no absolute home or work directory."""
    root = PKG.parent
    parts = (("..", "/shared"), ("/work", "/"), ("/home", "/"), ("/root", "/"))
    needles = ["".join(p) for p in parts]
    bad = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (not path.is_file() or rel.parts[0].startswith(".") or "egg-info" in rel.parts[0]
                or "__pycache__" in rel.parts or path.suffix in (".png", ".pyc", ".gz", ".npz")
                or rel.parts[0] in ("outputs", "multirun", "data")):
            continue
        text = path.read_text(errors="ignore")
        bad += [f"{rel}: {n}" for n in needles if n in text]
    assert not bad, bad
