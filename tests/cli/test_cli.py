"""The CLI end to end, in subprocesses, as a user types it."""

from __future__ import annotations

import csv
import json

import pytest

from fedmoo.run.setup import resolve_device
from tests.inprocess import cli_in

REQUIRED = ["round", "test/acc_mean", "test/acc_std", "test/acc_worst10", "test/acc_best10",
            "train/loss_mean", "time/round_s"]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_help_and_version(cli):
    r = cli("--help")
    assert r.returncode == 0 and "run" in r.stdout and "list" in r.stdout
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("fedmoo ")


@pytest.mark.slow
def test_default_run_writes_results(cli):
    r = cli("run", "rounds=3", "hydra.run.dir=out")
    assert r.returncode == 0, r.stderr
    out = cli.cwd / "out"
    rows = _rows(out / "rounds.csv")
    assert [int(x["round"]) for x in rows] == [1, 2, 3]
    for col in REQUIRED:
        assert col in rows[0], col
    clients = _rows(out / "clients.csv")
    assert len(clients) == 30
    assert {"client", "num_train", "num_test", "accuracy", "loss"} <= set(clients[0])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 3
    assert summary["algorithm"].startswith("fedavg(")
    assert "torch" in summary["versions"] and summary["device"] == str(resolve_device("auto"))
    assert (out / ".hydra" / "config.yaml").exists()
    assert "test accuracy (%): mean" in r.stdout and "worst10%" in r.stdout


@pytest.mark.slow
def test_overrides_change_the_run(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("run", "rounds=2", "clients_per_round=5", "seed=3", "client.lr=0.05",
            "hydra.run.dir=out")
    assert r.returncode == 0, r.stderr
    cfg = (cli.cwd / "out" / ".hydra" / "config.yaml").read_text()
    assert "clients_per_round: 5" in cfg and "seed: 3" in cfg and "lr: 0.05" in cfg


def test_cfg_job_prints_config(cli):
    r = cli("run", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert "algo:" in r.stdout and "name: fedavg" in r.stdout and "rounds: 100" in r.stdout


@pytest.mark.slow
def test_multirun_one_directory_per_job(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("run", "-m", "seed=0,1", "rounds=2", "hydra.sweep.dir=sweep")
    assert r.returncode == 0, r.stderr
    jobs = sorted(p.name for p in (cli.cwd / "sweep").iterdir()
                  if p.is_dir() and p.name != ".fedmoo")   # the sweep's own notes (run/sweeps.py)
    assert jobs == ["0", "1"]
    for j in jobs:
        assert (cli.cwd / "sweep" / j / "summary.json").exists()


def test_list_shows_groups(cli):
    r = cli("list")
    assert r.returncode == 0
    for group in ("algo:", "data:", "partition:", "model:", "attack:", "experiment:"):
        assert group in r.stdout
    assert "fedavg" in r.stdout and "synthetic" in r.stdout


def test_unknown_group_option_is_one_line_exit_2(cli):
    r = cli("run", "algo=nope")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown algo 'nope'" in lines[0] and "fedavg" in lines[0]


@pytest.mark.parametrize("args", [["seed=0,1"], ["-m", "seed=0,1", "--cfg", "job"]])
def test_several_values_without_a_sweep_say_how_to_sweep(cli, args):
    """Hydra's advice, 'add --multirun', was wrong where -m was given (with --cfg)."""
    r = cli("run", *args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == ("fedmoo: error: seed=0,1 gives several values: sweep them with -m (one "
                        "job each), or write a list value as key=[a,b]; --cfg shows one job's "
                        "config: give one value")


@pytest.mark.parametrize("flag", ["--info", "-i"])
def test_hydra_info_takes_its_topic(cli, flag):
    """`fedmoo run --info defaults` (Hydra's flag, `fedmoo run --hydra-help`): the topic is no
    override ('defaults' is not an override (key=value) before)."""
    r = cli("run", flag, "defaults", "algo=fedfv")
    assert r.returncode == 0 and "Defaults List" in r.stdout, r.stderr


@pytest.mark.parametrize("args", [["-p", "nosuch"], ["--package=algo.nosuch"]])
def test_cfg_of_a_package_that_is_not_there_is_a_user_error(cli, args):
    """Hydra wrote `package 'nosuch' not found in config` and exited with 1 (a failed sweep)."""
    r = cli("run", "--cfg", "job", *args)
    name = args[-1].rpartition("=")[2]
    assert r.returncode == 2 and r.stderr.strip() == (
        f"fedmoo: error: --package {name}: no such key in the config; `fedmoo run --cfg job` "
        "shows the keys"), r.stderr
    assert cli("run", "--cfg", "job", "-p", "algo").stdout.startswith("# @package algo\n")


def test_unknown_command_exit_2(cli):
    r = cli("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr
