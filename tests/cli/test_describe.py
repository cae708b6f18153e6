"""`fedmoo describe` and the composition of the dataset configs. The commands run in-process
(tests.inprocess) but for test_bad_override_is_exit_2, a real `python -m fedmoo` process."""

from __future__ import annotations

import json

import pytest

from fedmoo.cli.config import compose
from fedmoo.cli.describe import describe
from tests.inprocess import cli_in


@pytest.mark.slow
def test_describe_json_schema_on_digits(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("describe", "data=digits", "num_clients=5", "partition=dirichlet", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert set(info) == {"num_params", "num_clients", "clients"}
    assert info["num_params"] == 64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10
    assert info["num_clients"] == 5 and [c["id"] for c in info["clients"]] == list(range(5))
    for c in info["clients"]:
        assert set(c) == {"id", "train", "val", "test", "labels"}
        assert sum(c["labels"].values()) == c["train"] and c["val"] == 0
    assert sum(c["train"] for c in info["clients"]) == 1347
    assert sum(c["test"] for c in info["clients"]) == 450


@pytest.mark.slow
def test_describe_text_and_plot(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("describe", "data=digits", "--plot", "labels.png")
    assert r.returncode == 0, r.stderr
    assert "55,210 parameters" in r.stdout and "20 clients" in r.stdout
    assert (cli.cwd / "labels.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = cli("describe", "data=digits", "--plot", "labels.png/x.png")     # under a file
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("fedmoo: error: --plot labels.png/x.png: cannot write there (")
    r = cli("describe", "data=digits", "--plot", "labels.txt")     # was matplotlib's traceback
    assert r.returncode == 2
    assert r.stderr == "fedmoo: error: --plot labels.txt: give a .png, .pdf or .svg file\n"
    assert not (cli.cwd / "labels.txt").exists()


@pytest.mark.slow
def test_model_only_prints_paper_counts_without_data(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("describe", "data=cifar10", "--model-only")
    assert r.returncode == 0, r.stderr
    assert "797,962 parameters" in r.stdout and not (cli.cwd / "data").exists()
    for data, count in (("fmnist", 21_840), ("femnist", 1_206_590)):
        assert describe(compose([f"data={data}"]), model_only=True)["num_params"] == count
    three = describe(compose(["setup=fedfv_fmnist_one_class_per_client", "model=logreg"]),
                     model_only=True)
    assert three["num_params"] == 784 * 3 + 3          # 3 classes after compact_labels


@pytest.mark.slow
def test_missing_dataset_is_exit_2_one_line(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("describe", "data=cifar10", "data.download=false")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "data=cifar10" in lines[0] and "cifar-10-batches-py" in lines[0]
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in lines[0]


def test_bad_override_is_exit_2(cli):
    r = cli("describe", "data=nope")
    assert r.returncode == 2 and "unknown data 'nope'" in r.stderr


@pytest.mark.parametrize("overrides,want", [
    (["algo=fedavg", "data=cifar10"],
     {"model": "cnn_cifar", "partition": "shards", "num_clients": 100, "clients_per_round": 10,
      "lr": 0.01, "batch_size": 10, "shards_per_client": 2, "num_shards": None,
      "split": "dataset"}),
    (["algo=fedavg", "setup=fedmgda_plus_cifar10_shards"],
     {"model": "cnn_cifar", "partition": "shards", "num_clients": 100, "clients_per_round": 10,
      "lr": 0.01, "batch_size": 10, "shards_per_client": 5, "num_shards": 500,
      "split": "pooled"}),
    (["algo=fedavg", "data=fmnist", "partition=one_class_per_client"],
     {"model": "cnn_fmnist", "partition": "one_class_per_client", "num_clients": 100,
      "clients_per_round": 10, "lr": 0.01, "batch_size": 10, "classes": None}),
    (["algo=fedavg", "setup=fedfv_fmnist_one_class_per_client"],
     {"model": "cnn_fmnist", "partition": "one_class_per_client", "num_clients": 3,
      "clients_per_round": None, "lr": 0.1, "batch_size": None, "classes": [0, 2, 6]}),
    (["algo=fedavg", "setup=fedfv_fmnist_one_class_per_client", "client.lr=0.5"],
     {"lr": 0.5}),
    (["algo=fedavg", "data=emnist"],
     {"model": "cnn_femnist", "partition": "femnist_skewed", "num_clients": 100}),
    (["algo=fedavg", "data=tinyimagenet"], {"model": "resnet18_gn", "beta": 0.5}),
    (["algo=fedavg", "setup=adafed_tinyimagenet_dirichlet"], {"model": "resnet18_gn", "beta": 0.05}),
    (["algo=fedavg", "data=adult"], {"model": "logreg", "num_clients": 2, "split": "dataset"}),
])
def test_dataset_configs_compose(overrides, want):
    cfg = compose(overrides)
    flat = {"model": cfg["model"]["name"], "partition": cfg["partition"]["name"],
            "num_clients": cfg["num_clients"], "clients_per_round": cfg["clients_per_round"],
            "lr": cfg["client"]["lr"], "batch_size": cfg["client"]["batch_size"],
            **{k: v for k, v in cfg["partition"].items() if k != "name"}}
    for key, value in want.items():
        assert flat[key] == value, key


@pytest.mark.slow
def test_every_dataset_config_builds_its_default_model():
    from fedmoo.cli.groups import group_options

    for data in group_options("data"):
        info = describe(compose([f"data={data}"]), model_only=True)
        assert info["num_params"] > 0, data


@pytest.mark.slow
def test_digits_end_to_end_run(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("run", "data=digits", "rounds=3", "progress=false", "hydra.run.dir=out")
    assert r.returncode == 0, r.stderr
    summary = json.loads((cli.cwd / "out" / "summary.json").read_text())
    assert summary["data"] == "digits" and summary["num_clients"] == 20
    assert (cli.cwd / "out" / "partition.npz").is_file()
