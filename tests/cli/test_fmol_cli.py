"""FMOL end to end from the CLI: MultiMNIST built from IDX fixtures, FMGDA and FSMGDA on both
engines, per-task columns, rounds to threshold, the table spec and the radar chart. The commands
run in-process (tests.inprocess): the CLI's process behaviour is tested elsewhere."""

from __future__ import annotations

import csv
import json

import pytest

from tests.data.conftest import write_mnist_family
from tests.inprocess import cli_in

ARGS = ("data=multimnist", "num_clients=2", "rounds=3", "algo.local_steps=2", "progress=false",
        "partition.shards_per_client=1", "client.batch_size=8", "loss_threshold=100")


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_fmgda_and_fsmgda_run_from_the_cli_and_tabulate(tmp_path):
    cli = cli_in(tmp_path)
    write_mnist_family(cli.cwd / "data" / "MNIST" / "raw", n_train=(4,) * 10, n_test=(1,) * 10)
    for algo, engine in (("fmgda", "sequential"), ("fsmgda", "batched")):
        r = cli("run", f"algo={algo}", f"engine={engine}", *ARGS, f"hydra.run.dir=sweep/{algo}")
        assert r.returncode == 0, r.stderr
        assert "train loss per task: task0" in r.stdout
        out = cli.cwd / "sweep" / algo
        first = rows(out / "rounds.csv")[0]
        for col in ("test/task0_acc_mean", "test/task1_loss", "train/task1_loss_norm",
                    "server/d_norm_sq", "server/lambda_task0", "server/lambda_task1"):
            assert col in first, col
        lam = float(first["server/lambda_task0"]) + float(first["server/lambda_task1"])
        assert abs(lam - 1) < 1e-9
        summary = json.loads((out / "summary.json").read_text())
        assert summary["final"]["train/rounds_to_threshold"] == 1.0     # threshold 100: round 1
        assert summary["tasks"] == ["L", "R"]
        assert "task1_accuracy" in rows(out / "clients.csv")[0]
    r = cli("table", "sweep", "--metric", "train/rounds_to_threshold", "--metric",
            "train/task0_loss")
    assert r.returncode == 0 and "fmgda" in r.stdout and "fsmgda" in r.stdout, r.stderr
    r = cli("plot", "sweep", "--radar", "--metric", "train/task0_loss", "--logy", "--out", "png")
    assert r.returncode == 0, r.stderr
    assert (cli.cwd / "png" / "radar.png").stat().st_size > 0
    r = cli("plot", "sweep", "--radar", "test/acc_client{}", "--out", "png")
    assert r.returncode == 2 and "--radar test/acc_client{}" in r.stderr


@pytest.mark.slow
def test_multitask_model_on_single_task_data_is_a_user_error(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("run", "model=multi_lenet", "data=synthetic", "rounds=1", "progress=false",
            "hydra.run.dir=x")
    assert r.returncode == 2
    assert "model=multi_lenet is multi-task but the data has one task; use a single-task model" in r.stderr
