"""Paper setups are named (``setup=``), never implied: a partition changes the partition only,
a setup applies its paper's numbers, ``fedmoo run`` names the setup it applied, and the data +
partition pairs that used to apply one by themselves say which setup to add."""

from __future__ import annotations

import pytest
import yaml

from fedmoo.config import schema
from fedmoo.cli import setups
from fedmoo.cli.config import compose
from fedmoo.cli.groups import CONF_DIR, group_options
from tests.data.conftest import write_mnist_family
from tests.inprocess import run_main

KNOBS = ("rounds", "num_clients", "clients_per_round")
DATA = sorted(p.stem for p in (CONF_DIR / "data").glob("*.yaml"))
PARTITIONS = sorted(p.stem for p in (CONF_DIR / "partition").glob("*.yaml"))


def _own_defaults(data: str) -> dict:
    """rounds, num_clients, clients_per_round and client.* as they are stated: the schema's
    defaults (fedmoo/schema.py), then what data/<data>.yaml sets."""
    base = schema.defaults()
    own = yaml.safe_load((CONF_DIR / "data" / f"{data}.yaml").read_text())
    want = {k: own.get(k, base[k]) for k in KNOBS}
    want["client"] = {**base["client"], **own.get("client", {})}
    return want


@pytest.mark.parametrize("data", DATA)
def test_a_partition_changes_the_partition_only(data):
    """Every data x partition pair on disk keeps the data's own rounds, clients and client.*."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    want = _own_defaults(data)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            for partition in PARTITIONS:
                cfg = OmegaConf.to_container(hydra_compose(
                    config_name="config", overrides=[f"data={data}", f"partition={partition}"]))
                got = {k: cfg[k] for k in (*KNOBS, "client")}
                assert got == want, (data, partition)
                assert cfg["partition"]["name"] in (partition, "natural")
    finally:
        GlobalHydra.instance().clear()


# Each setup's data, partition and the numbers it sets (from the papers, as the old presets).
SETUPS = {
    "adafed_cifar10_dirichlet": ("cifar10", "dirichlet", {
        "beta": 0.5, "rounds": 100, "num_clients": 10, "clients_per_round": None, "lr": 0.01,
        "batch_size": 64, "model": "cnn_cifar"}),
    "adafed_femnist_skewed": ("femnist", "femnist_skewed", {
        "classes_per_client": 5, "num_clients": 100, "clients_per_round": 10, "rounds": 1500}),
    "adafed_tinyimagenet_dirichlet": ("tinyimagenet", "dirichlet", {
        "beta": 0.05, "num_clients": 20, "rounds": 400, "lr": 0.02}),
    "fedfv_fmnist_one_class_per_client": ("fmnist", "one_class_per_client", {
        "classes": [0, 2, 6], "compact_labels": True, "split": "pooled", "pool": "all",
        "fractions": [0.8, 0.1, 0.1], "order": ["train", "test", "val"], "num_clients": 3,
        "clients_per_round": None, "rounds": 200, "lr": 0.1, "batch_size": None}),
    "fedfv_mnist_shards": ("mnist", "shards", {
        "shards_per_client": 2, "num_shards": None, "split": "pooled", "pool": "train",
        "fractions": [0.8, 0.0, 0.2], "num_clients": 200, "clients_per_round": 20}),
    "fedmgda_plus_cifar10_shards": ("cifar10", "shards", {
        "shards_per_client": 5, "num_shards": 500, "split": "pooled", "pool": "train",
        "fractions": [0.8, 0.1, 0.1], "num_clients": 100, "rounds": 2000, "batch_size": 10}),
    "fedmgda_plus_fmnist_shards": ("fmnist", "shards", {
        "shards_per_client": 5, "num_shards": 500, "split": "pooled", "pool": "train",
        "fractions": [0.8, 0.1, 0.1], "num_clients": 100, "rounds": 2000}),
}


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_a_named_setup_picks_its_data_partition_and_numbers(name):
    data, partition, want = SETUPS[name]
    cfg = compose([f"setup={name}"])
    flat = {**cfg["partition"], **{k: cfg[k] for k in KNOBS}, **cfg["client"],
            "model": cfg["model"]["name"]}
    assert (cfg["data"]["name"], cfg["partition"]["name"]) == (data, partition)
    assert {k: flat[k] for k in want} == want
    assert compose([f"setup={name}", "rounds=7"])["rounds"] == 7     # the command line wins


def test_setups_on_disk():
    assert sorted(group_options("setup")) == sorted(SETUPS)


def test_the_line_naming_the_setup():
    about = group_options("setup")["adafed_cifar10_dirichlet"]
    assert about.startswith("AdaFed CIFAR-10 setup 2: 10 clients, Dirichlet 0.5")
    assert setups.applied({"setup": "adafed_cifar10_dirichlet", "data": "cifar10",
                           "partition": "dirichlet"}) == f"setup: adafed_cifar10_dirichlet ({about})"
    assert setups.applied({"setup": None, "data": "cifar10", "partition": "dirichlet"}) is None
    assert setups.applied({"setup": None, "data": "cifar10", "partition": "iid"}) is None
    assert setups.applied({"setup": None, "data": "synthetic", "partition": "natural"}) is None


def test_unknown_setup_is_refused(tmp_path):
    r = run_main(["run", "setup=adafed_cifar10"], tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("fedmoo: error: unknown setup 'adafed_cifar10'; choose one of: "
                               "adafed_cifar10_dirichlet, ")


def _setup_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if "setup" in x]


@pytest.mark.slow
def test_run_names_the_setup_it_applied(tmp_path):
    """On tiny Fashion-MNIST files (20 images a class): the named setup gets one info line (one
    for a whole sweep), the former preset pair one warning naming the setup, a plain run none."""
    system = tmp_path / "fmnist"
    write_mnist_family(system, n_train=(10,) * 10, n_test=(10,) * 10, gz=True)
    tiny = ["data.download=false", f"data.system_dir={system}", "model=logreg", "rounds=1",
            "progress=false"]
    r = run_main(["run", "setup=fedfv_fmnist_one_class_per_client", *tiny,
                  "hydra.run.dir=named"], tmp_path)
    assert r.returncode == 0, r.stderr
    about = group_options("setup")["fedfv_fmnist_one_class_per_client"]
    assert _setup_lines(r.stderr) == [f"fedmoo: setup: fedfv_fmnist_one_class_per_client ({about})"]
    assert f"setup: fedfv_fmnist_one_class_per_client ({about})" in (
        tmp_path / "named" / "fedmoo.log").read_text()

    r = run_main(["run", "-m", "setup=fedfv_fmnist_one_class_per_client", "seed=0,1", *tiny,
                  "hydra.sweep.dir=sweep"], tmp_path)      # a sweep says it once
    assert r.returncode == 0, r.stderr
    assert _setup_lines(r.stderr) == [f"fedmoo: setup: fedfv_fmnist_one_class_per_client ({about})"]
    for job in ("0", "1"):
        assert "setup: fedfv_fmnist_one_class_per_client" in (
            tmp_path / "sweep" / job / "fedmoo.log").read_text()

    r = run_main(["run", "data=fmnist", "partition=one_class_per_client", "num_clients=10",
                  *tiny, "hydra.run.dir=pair"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _setup_lines(r.stderr) == []          # a data + partition pair applies no setup

    r = run_main(["run", "data=fmnist", "partition=iid", "num_clients=10", *tiny,
                  "hydra.run.dir=plain"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _setup_lines(r.stderr) == []


def test_every_experiment_names_only_setups_that_exist():
    names = set(group_options("setup"))
    for path in (CONF_DIR / "experiment").rglob("*.yaml"):
        for entry in yaml.safe_load(path.read_text()).get("defaults", []):
            if isinstance(entry, dict) and "override /setup" in entry:
                assert entry["override /setup"] in names, path


def test_announce_says_a_line_once_per_sweep(caplog, tmp_path):
    import logging

    choices = {"setup": "fedfv_mnist_shards", "data": "mnist", "partition": "shards"}
    with caplog.at_level(logging.DEBUG, logger="fedmoo"):
        setups.announce(choices)                       # single runs: every time
        setups.announce(choices)
        setups.announce(choices, tmp_path / "a")       # the jobs of a sweep: once, then debug
        setups.announce(choices, tmp_path / "a")
        setups.announce(choices, tmp_path / "b")
        setups.announce({"setup": None, "data": "mnist", "partition": "shards"}, tmp_path / "a")
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO", "INFO", "DEBUG", "INFO"]
