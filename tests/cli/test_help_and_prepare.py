"""fedmoo's own `run --help`, `list experiment`'s descriptions, Hydra's job name, and `fedmoo
prepare` / the Fashion-MNIST loader saying where the data really is (or how to get it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedmoo.cli.groups import GROUPS, group_options
from fedmoo.cli.main import main
from fedmoo.errors import UserError
from tests.data.conftest import write_mnist_family
from tests.data.sources import source


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_run_help_is_fedmoos_own(capsys, flag):
    assert main(["run", "algo=fedfv", flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: fedmoo run [OVERRIDES...] [-m] [--cfg job] [--hydra-help]\n")
    assert "powered by Hydra" not in out and "row/" not in out
    for needle in ("config groups", "  algo=", "fedavg (default)", "synthetic (default)",
                   "  rounds=100", "  seed=0", "fedmoo run --cfg job", "fedmoo list [GROUP]",
                   "--hydra-help", "fedmoo run -m experiment=fmgda/multifashion_demo",
                   "hydra/launcher=lockstep", "docs/scaling.md"):
        assert needle in out, needle
    assert max(len(line) for line in out.splitlines()) <= 100
    for group in GROUPS:
        if group != "experiment":             # experiments are counted per paper
            for option in group_options(group):
                assert option in out, (group, option)


@pytest.mark.parametrize("command", ["describe", "pareto", "table", "plot", "prepare", "list"])
def test_command_help_reads_as_plain_text(capsys, command):
    """A command's --help is for a terminal: `code`, not the docstrings' reST ``code``."""
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: fedmoo {command}") and "``" not in out


@pytest.mark.parametrize("args", [["table", "x", "--format", "xls"], ["plot", "x"],
                                  ["pareto"], ["list", "algoo"], ["describe", "--bogus"],
                                  ["prepare", "--bogus"]])
def test_a_command_line_mistake_is_one_line(capsys, args):
    """argparse's own refusals: one line (no usage block above it) and status 2."""
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"fedmoo {args[0]}: error: ") and "--help" in err


@pytest.mark.slow
def test_hydra_help_stays_hydras(cli):
    r = cli("run", "--hydra-help")
    assert r.returncode == 0 and "Hydra (1." in r.stdout, r.stderr


def test_hydra_job_name_is_fedmoo():
    """Hydra names its log file after the job: <run dir>/fedmoo.log."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            cfg = compose(config_name="config", return_hydra_config=True)
        assert cfg.hydra.job.name == "fedmoo"
    finally:
        GlobalHydra.instance().clear()


def test_list_experiment_shows_what_each_reproduces(capsys):
    assert main(["list", "experiment"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("experiment:  (run one: fedmoo run -m experiment=NAME)\n")
    line = next(x for x in out.splitlines() if x.strip().startswith("fedfv/table3 "))
    assert "fedmoo run" not in line and "FedFV" in line


def test_list_an_option_prints_its_declared_hyperparameters(capsys):
    assert main(["list", "algo", "fedmgda_plus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("algo=fedmgda_plus: FedMGDA+: ")
    eta_decay = next(x for x in lines if x.strip().startswith("algo.eta_decay="))
    assert eta_decay.split()[0] == "algo.eta_decay=0.1" and "total step decay" in eta_decay
    normalize = next(x for x in lines if x.strip().startswith("algo.normalize="))
    assert normalize.split()[0] == "algo.normalize=true"      # the preset's own default
    assert len(lines) == 1 + 7                     # epsilon ... solver: every knob, once
    assert main(["list", "algo", "median"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "  (no hyperparameters)"
    assert main(["list", "algo", "fedmgda_pls"]) == 2
    assert "did you mean fedmgda_plus" in capsys.readouterr().err


def test_prepare_says_where_the_data_is(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    system = tmp_path / "system"                       # a stand-in for Debian's folder
    write_mnist_family(system, n_train=(3,) * 10, n_test=(1,) * 10, gz=True)
    data_dir = tmp_path / "data"
    assert main(["prepare", "data=fmnist", f"data_dir={data_dir}",
                 f"data.system_dir={system}", "data.download=false"]) == 0
    out = capsys.readouterr().out
    assert f"ready: data=fmnist in {system} (not in data_dir {data_dir}): 30 train + 10 test" in out
    assert main(["prepare", "data=synthetic"]) == 0
    assert "ready: data=synthetic in memory (generated, no files):" in capsys.readouterr().out


def test_prepare_refuses_a_key_run_refuses(capsys):
    """``prepare -m +x=1`` once prepared data for a sweep that ``run`` then refused."""
    assert main(["prepare", "-m", "data=digits", "+x=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'+x=1' adds a config key 'x' that fedmoo does not use" in err[0]


def test_prepare_goes_on_past_a_missing_dataset(capsys, tmp_path, monkeypatch):
    """``prepare -m data=mnist,digits`` offline stopped at mnist; digits is now prepared too."""
    from fedmoo.data import download

    def offline(url):
        raise OSError("offline")

    monkeypatch.setattr(download, "urlopen", offline)
    assert main(["prepare", "-m", "data=mnist,digits,mnist", f"data_dir={tmp_path}"]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("ready: data=digits in ") and "prepared" not in out
    err = err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("fedmoo: error: data=mnist: files not found at ")
    assert err[1] == "fedmoo: error: 1 of 2 dataset(s) could not be prepared (above)"


def test_missing_fashion_mnist_names_debians_package(tmp_path, monkeypatch):
    from fedmoo.data import mnist

    system = tmp_path / "usr-share"
    monkeypatch.setattr(mnist, "FMNIST_SYSTEM_DIR", str(system))
    monkeypatch.setattr(mnist.shutil, "which", lambda name: f"/usr/bin/{name}")
    with pytest.raises(UserError) as e:
        source("fmnist", tmp_path / "data", download=False, system_dir=str(system))
    msg = str(e.value)
    assert msg.startswith(f"data=fmnist: files not found at {tmp_path / 'data'}/FashionMNIST/raw")
    assert msg.endswith(f"; or install Debian's copy into {system}: "
                        "sudo apt-get install dataset-fashion-mnist")
    monkeypatch.setattr(mnist.shutil, "which", lambda name: None)      # no apt-get here
    with pytest.raises(UserError) as e:
        source("fmnist", tmp_path / "data", download=False, system_dir=str(system))
    assert "apt-get" not in str(e.value)
    with pytest.raises(UserError) as e:                               # another folder: no hint
        source("fmnist", tmp_path / "data", download=False, system_dir=str(tmp_path))
    assert "apt-get" not in str(e.value)


def test_where_reads_data_dir_relative_paths_as_inside(tmp_path):
    from fedmoo.cli.prepare import _where

    assert _where(None, "./data") == "./data"
    assert _where(str(tmp_path / "d" / "FashionMNIST" / "raw"), str(tmp_path / "d")) == \
        str(Path(tmp_path / "d" / "FashionMNIST" / "raw"))
    assert _where("/elsewhere", str(tmp_path)) == f"/elsewhere (not in data_dir {tmp_path})"
