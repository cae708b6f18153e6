"""A researcher's own project (examples/plugin) used through the normal CLI, without forking."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.inprocess import run_main

PLUGIN = ROOT / "examples" / "plugin"
SMALL = ["progress=false", "num_clients=6", "clients_per_round=3", "data.max_samples=100"]


@pytest.fixture
def with_plugin(cli):
    env = {"FEDMOO_PLUGINS": "myproj", "PYTHONPATH": f"{ROOT}:{PLUGIN}"}

    def run(*args: str):
        return cli(*args, env=env)

    run.cwd = cli.cwd
    return run


def test_list_run_and_sweep_a_plugin_rule(with_plugin):
    listed = with_plugin("list", "algo")
    assert "lossavg" in listed.stdout and "[plugin myproj]" in listed.stdout
    r = with_plugin("run", *SMALL, "algo=lossavg", "algo.power=2", "rounds=2", "hydra.run.dir=a")
    assert r.returncode == 0, r.stderr
    summary = json.loads((with_plugin.cwd / "a" / "summary.json").read_text())
    assert summary["algo"] == "lossavg" and summary["hparams"] == {"power": 2, "eta": 1.0}
    sweep = with_plugin("run", "-m", "experiment=myproj/compare", *SMALL, "rounds=1", "seed=0",
                        "hydra.sweep.dir=sw")
    assert sweep.returncode == 0, sweep.stderr
    algos = sorted(json.loads((with_plugin.cwd / "sw" / j / "summary.json").read_text())["algo"]
                   for j in "012")
    assert algos == ["fedavg", "lossavg", "qfedavg"]


def test_checks_work_for_plugins(with_plugin, tmp_path):
    bad = with_plugin("run", *SMALL, "algo=lossavg", "algo.powr=2")
    assert bad.returncode == 2
    assert "did you mean algo.power? valid keys of algo: eta, name, power" in bad.stderr
    neg = with_plugin("run", *SMALL, "algo=lossavg", "algo.power=-1", "hydra.run.dir=n")
    assert neg.returncode == 2, neg.stderr
    assert neg.stderr.splitlines() == ["fedmoo: error: algo.power=-1 must be a number in "
                                       "[0.0, inf); e.g. algo.power=1.0 (for algo=lossavg)"]
    assert not (with_plugin.cwd / "n").exists()     # declared in myproj/lossavg.py: checked first
    # without the plugin declared, the rule does not exist (in this process: the plugin is
    # imported only by the subprocesses above)
    absent = run_main(["run", *SMALL, "algo=lossavg"], tmp_path)
    assert absent.returncode == 2 and "unknown algo 'lossavg'" in absent.stderr


def test_plugin_targets_are_allowed_others_not(monkeypatch):
    from fedmoo.cli.trusted import target_allowed

    monkeypatch.setenv("FEDMOO_PLUGINS", "myproj")
    monkeypatch.syspath_prepend(str(PLUGIN))
    assert target_allowed("myproj.lossavg.LossAvg")        # a class the plugin defines
    assert not target_allowed("myprojx.Evil") and not target_allowed("os.system")
    # not what its modules import: Hydra would follow the dots to torch.save or fedmoo's declare
    assert not target_allowed("myproj.lossavg.torch.save")
    assert not target_allowed("myproj.lossavg.declare")
    assert not target_allowed("myproj.callbacks.Notify")   # no such module


def test_a_missing_plugin_is_one_line(tmp_path):
    r = run_main(["run", "rounds=1"], tmp_path, env={"FEDMOO_PLUGINS": "nosuchproj"})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "fedmoo: error: plugin 'nosuchproj' (from FEDMOO_PLUGINS or a fedmoo.plugins entry "
        "point) is not importable; install it or put its folder on PYTHONPATH"]


@pytest.mark.parametrize("name", ["os", "json"])
def test_an_undeclared_package_is_not_a_plugin(name, tmp_path):
    # FEDMOO_PLUGINS=os once admitted os.* as callback targets: the command ran os.makedirs
    r = run_main(["run", "rounds=1", "progress=false", "+hydra.callbacks.x._target_=os.makedirs",
                  "+hydra.callbacks.x.name=made_by_hydra"], tmp_path, env={"FEDMOO_PLUGINS": name})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert (f"FEDMOO_PLUGINS names {name!r}, which is not a fedmoo plugin: a plugin is a "
            "package that declares itself with an empty file named fedmoo-plugin") in r.stderr
    assert not (tmp_path / "made_by_hydra").exists() and not (tmp_path / "outputs").exists()


def test_the_marker_file_declares_a_package(monkeypatch, tmp_path):
    from fedmoo.config import plugins
    from fedmoo.errors import UserError

    pkg = tmp_path / "ownproj"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('imported while checking')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FEDMOO_PLUGINS", "ownproj")
    with pytest.raises(UserError, match=f"in its folder \\({pkg}\\)"):
        plugins.names()                          # found, not imported, not declared
    (pkg / "fedmoo-plugin").write_text("")
    assert "ownproj" in plugins.names()          # still not imported: its __init__ would exit

def _quiet_plugin(root):
    """The shortest plugin: one module, its hyperparameters, its class and its declaration (the
    option itself: no YAML), in a package that declares itself with the marker file."""
    pkg = root / "quietproj"
    pkg.mkdir()
    (pkg / "fedmoo-plugin").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "quiet.py").write_text(
        "from dataclasses import dataclass\n\n"
        "from fedmoo.algorithms import Algorithm\n"
        "from fedmoo.config.hparams import declare\nfrom fedmoo.config.knobs import knob\n\n\n"
        "@dataclass\nclass Params:\n"
        "    eta: float = knob(1.0, 'server step', lo=0.0, lo_open=True)\n\n\n"
        "class Quiet(Algorithm):\n"
        "    def step(self, state, cohort):\n"
        "        return cohort.deltas.mean(0), self.hp.eta, {}, {}\n\n\n"
        "declare('algo', 'quiet', Params, Quiet, 'Quiet: FedAvg, uniform')\n")


def test_a_plugin_is_one_module(cli):
    _quiet_plugin(cli.cwd)
    env = {"FEDMOO_PLUGINS": "quietproj", "PYTHONPATH": f"{ROOT}:{cli.cwd}"}
    r = cli("list", "algo", env=env)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("quiet "))
    assert line.split(None, 1)[1] == "Quiet: FedAvg, uniform [plugin quietproj]"
    r = cli("run", *SMALL, "algo=quiet", "algo.eta=0.5", "rounds=2", "hydra.run.dir=q", env=env)
    assert r.returncode == 0, r.stderr
    summary = json.loads((cli.cwd / "q" / "summary.json").read_text())
    assert summary["algo"] == "quiet" and summary["hparams"] == {"eta": 0.5}
    r = cli("run", *SMALL, "algo=quiet", "algo.eta=0", "hydra.run.dir=bad", env=env)
    assert r.returncode == 2 and r.stderr.startswith("fedmoo: error: algo.eta=0 must be")
    assert not (cli.cwd / "bad").exists()


def test_a_plugin_imported_in_python_counts_for_fedmoo_api_run(tmp_path):
    import subprocess
    import sys

    code = ("import myproj, fedmoo.api as fm\n"
            f"r = fm.run({SMALL + ['algo=lossavg', 'algo.power=2', 'rounds=1']!r}, run_dir='r')\n"
            "print(r.status)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "FEDMOO_PLUGINS"}
    env.update(PYTHONPATH=f"{ROOT}:{PLUGIN}", OMP_NUM_THREADS="1", FEDMOO_DATA=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "completed"
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["algo"] == "lossavg" and summary["hparams"] == {"power": 2, "eta": 1.0}


def test_a_plugin_data_source_declares_its_settings(with_plugin):
    r = with_plugin("run", "data=blobs", "data.spread=0.5", "rounds=1", "progress=false",
                    "hydra.run.dir=b")
    assert r.returncode == 0, r.stderr
    summary = json.loads((with_plugin.cwd / "b" / "summary.json").read_text())
    assert summary["config"]["data"] == {"name": "blobs", "input_shape": [2], "num_classes": 3,
                                         "samples": 100, "spread": 0.5, "seed": 0}
    for bad, needle in (("data.spread=0", "data.spread=0 must be a number in (0.0, inf)"),
                        ("+data.bogus=1", "data.bogus is not a hyperparameter of data=blobs; "
                                          "valid keys: input_shape, num_classes, samples")):
        r = with_plugin("run", "data=blobs", bad, "hydra.run.dir=bad")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0].startswith(f"fedmoo: error: {needle}"), r.stderr
        assert not (with_plugin.cwd / "bad").exists()


@pytest.mark.parametrize("where", ["hparams.py", "__init__.py"])
def test_a_plugin_that_exits_is_named_and_refused(where, cli):
    """Script-style code (sys.exit at the end of a file) once ended fedmoo with status 0 having
    done nothing."""
    tmp_path = cli.cwd
    pkg = tmp_path / "exitproj"
    pkg.mkdir()
    (pkg / "fedmoo-plugin").write_text("")
    (pkg / "hparams.py").write_text(   # declares an algorithm its package implements
        "from fedmoo.config.hparams import declare\nfrom fedmoo.config.hparams.algo import FedAvg\n\n"
        "declare('algo', 'exitavg', FedAvg, 'exitproj:ExitAvg', 'exits')\n")
    (pkg / "__init__.py").write_text("")
    (pkg / where).write_text("import sys\nsys.exit(0)\n")
    r = cli("run", "rounds=1", "progress=false", "algo=exitavg",
            env={"FEDMOO_PLUGINS": "exitproj", "PYTHONPATH": f"{ROOT}:{tmp_path}"})
    assert r.returncode == 2, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "exitproj" in line and ("SystemExit" in line or "sys.exit(0)" in line), line
    assert not (tmp_path / "outputs").exists()     # imported before anything is written
