"""The exit status (fedmoo.cli.status, the one function that maps outcomes to codes) and the run
path's use of Hydra's public API only (fedmoo.cli.hydra_run, fedmoo's sweeper)."""

from __future__ import annotations

import ast
import pickle
import signal
from pathlib import Path

import pytest

from fedmoo.cli.hydra_run import plan
from fedmoo.cli.status import exit_status
from fedmoo.errors import DivergenceError, RunInterrupted, UserError

ROOT = Path(__file__).resolve().parents[2]


def test_exit_status_of_each_outcome():
    assert exit_status() == 0                                  # done / already done
    assert exit_status(failed_jobs=0) == 0
    assert exit_status(failed_jobs=1) == 1 and exit_status(failed_jobs=7) == 1
    assert exit_status(UserError("bad value")) == 2
    assert exit_status(DivergenceError("nan")) == 3
    assert exit_status(RunInterrupted("stopped", signal.SIGTERM)) == 143
    assert exit_status(RunInterrupted("stopped", signal.SIGINT)) == 130
    assert exit_status(KeyboardInterrupt()) == 130
    with pytest.raises(ValueError, match="no exit status for RuntimeError"):
        exit_status(RuntimeError("a bug"))


def test_plan_decides_the_mode_from_the_command_line():
    def mode(args):
        p = plan(args)
        return p.multirun, p.overrides

    assert mode(["seed=1"]) == (False, ["seed=1", "hydra.mode=RUN"])
    assert mode(["--run", "seed=1"]) == (False, ["seed=1", "hydra.mode=RUN"])
    assert mode(["-m", "seed=0,1"]) == (True, ["seed=0,1", "hydra.mode=MULTIRUN"])
    assert mode(["--multirun", "seed=0,1"]) == (True, ["seed=0,1", "hydra.mode=MULTIRUN"])
    assert mode(["seed=0,1", "hydra.mode=MULTIRUN"]) == (True, ["seed=0,1", "hydra.mode=MULTIRUN"])
    assert mode(["hydra.mode=RUN"]) == (False, ["hydra.mode=RUN"])
    # -m wins over hydra.mode=RUN, as in Hydra (which warns and adds hydra.mode=MULTIRUN)
    assert mode(["-m", "hydra.mode=RUN"]) == (True, ["hydra.mode=RUN", "hydra.mode=MULTIRUN"])
    for other in (["--cfg", "job"], ["--info"], ["--hydra-help"], ["-m", "--run"],
                  ["hydra.mode=run"], ["+hydra.mode=RUN"]):
        assert plan(other).multirun is None, other      # @hydra.main takes them (or refuses them)
    assert plan(["--cfg", "job", "seed=1"]).flags == ("--cfg", "job")


def test_plan_takes_hydras_config_flags(tmp_path):
    """--config-dir is the first entry of hydra.searchpath (where Hydra puts both), for a run,
    a sweep and @hydra.main's flags; --config-name names the primary config."""
    uri = tmp_path.resolve().as_uri()
    for args in (["--config-dir", str(tmp_path)], [f"--config-dir={tmp_path}"],
                 ["-cd", str(tmp_path)]):
        p = plan([*args, "-m", "seed=0,1", "hydra.searchpath=[file:///x]"])
        assert p.multirun and p.overrides == ["seed=0,1", f"hydra.searchpath=[{uri},file:///x]",
                                              "hydra.mode=MULTIRUN"]
    assert plan(["-cn", "mine", "seed=1"]).config_name == "mine"
    assert plan(["--cfg", "job", "-cd", str(tmp_path)]).overrides[0] == f"hydra.searchpath=[{uri}]"
    with pytest.raises(UserError, match="--config-dir .*missing: no such folder"):
        plan([f"--config-dir={tmp_path / 'missing'}"])
    with pytest.raises(UserError, match="--config-path conf: give an absolute folder"):
        plan(["-cp", "conf"])


def test_the_grid_is_hydras_basic_sweepers():
    """fedmoo's sweeper expands a sweep as Hydra's basic sweeper does (this test fails loudly
    if a Hydra version changes the basic sweeper's grid)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fedmoo.cli.overrides import grid

    for args in (["a=1,2,3", "b=x,y"], ["a=range(0,3)", "b=1", "a=5,6"], ["c=choice(p,q)"],
                 ["+n=1,2", "~m", "k=[1,2]"], []):
        parsed = OverridesParser.create().parse_overrides(args)
        assert grid(parsed) == BasicSweeper.split_arguments(parsed, None)[0], args
    parsed = OverridesParser.create().parse_overrides(["a=1,2,3", "b=x,y"])
    assert grid(parsed)[:3] == [["a=1", "b=x"], ["a=1", "b=y"], ["a=2", "b=x"]]


class Loader:            # counts the compositions of Hydra's loader
    def __init__(self):
        self.calls = []

    def load_sweep_config(self, master, overrides):
        self.calls.append(tuple(overrides))
        return {"composed": list(overrides)}


def test_kept_configs_are_handed_over_once_and_not_pickled():
    from hydra_plugins.fedmoo_lockstep_launcher.grid_sweeper import KeptConfigs

    inner, master = Loader(), object()
    kept = KeptConfigs(inner)         # type: ignore[arg-type]
    kept.keep(master, [["seed=0"], ["seed=1"]])
    assert inner.calls == [("seed=0",), ("seed=1",)]
    copy = pickle.loads(pickle.dumps(kept))        # a launcher's worker process: composes
    assert copy.kept == {} and copy.master is None
    assert kept.load_sweep_config(master, ["seed=1"]) == {"composed": ["seed=1"]}
    assert kept.load_sweep_config(master, ["seed=0"]) == {"composed": ["seed=0"]}
    assert len(inner.calls) == 2                   # both from the kept ones
    kept.load_sweep_config(master, ["seed=0"])     # handed over once: composed again
    kept.load_sweep_config(object(), ["seed=1"])   # another master config: composed
    assert inner.calls[2:] == [("seed=0",), ("seed=1",)]


def _private_uses(source: str) -> list[str]:
    """Imports of hydra._internal, assignments to an attribute of anything imported from
    hydra / omegaconf, and uses of a private name of atexit / os / sys / gc in ``source``."""
    tree = ast.parse(source)
    foreign: set[str] = set()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                if full.startswith("hydra._internal"):
                    out.append(f"imports {full}")
                if full.split(".")[0] in ("hydra", "omegaconf"):
                    foreign.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            root = t
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(t, ast.Attribute) and isinstance(root, ast.Name) and root.id in foreign:
                out.append(f"assigns {ast.unparse(t)}")
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in ("atexit", "os", "sys", "gc")):
            out.append(f"uses {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in foreign:
            out.append(f"calls {ast.unparse(node)}")
    return sorted(out)


def test_no_private_hydra_or_python_internals():
    """fedmoo's code neither imports Hydra's private modules nor patches Hydra's objects, and
    ends the process with a normal interpreter exit (no atexit._run_exitfuncs, os._exit). The one
    exception is by design and not Python's: fedmoo/cli/process_exit.py asks glibc, through its
    public on_exit, to skip the C library's teardown once Python's own exit has finished."""
    files = sorted([*(ROOT / "fedmoo").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")])
    found = [f"{f.relative_to(ROOT)}: {u}" for f in files for u in _private_uses(f.read_text())]
    assert found == []
    # the checker finds what the code did before (cli/app.py, cli/main.py, compose_once.py)
    assert _private_uses(
        "import atexit, os\n"
        "from hydra._internal.hydra import Hydra\n"
        "from hydra.core.global_hydra import GlobalHydra\n"
        "Hydra.get_mode = lambda self, config_name, overrides: None\n"
        "GlobalHydra.instance().config_loader().load_sweep_config = print\n"
        "setattr(Hydra, 'run', print)\n"
        "atexit._run_exitfuncs()\n"
        "os._exit(0)\n") == sorted([
        "imports hydra._internal.hydra.Hydra", "assigns Hydra.get_mode",
        "assigns GlobalHydra.instance().config_loader().load_sweep_config",
        "calls setattr(Hydra, 'run', print)", "uses atexit._run_exitfuncs", "uses os._exit"])
