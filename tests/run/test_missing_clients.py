"""Clients without samples on the evaluated split are missing (NaN, left out, counted), never
0 %; a partition that leaves every client without them is refused."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedmoo.report.metrics import accuracy_metrics
from fedmoo.run.loop import run
from tests.conftest import small_cfg
from tests.data.conftest import write_mnist_family
from tests.inprocess import run_main
from tests.reliability.helpers import SMALL


def test_metrics_leave_out_and_count_clients_without_samples():
    out = accuracy_metrics(np.array([50.0, 0.0, 100.0]), np.array([1, 0, 1]), np.array([2, 0, 1]),
                           np.array([0.5, 0.0, 0.1]))
    assert out["test/acc_mean"] == 75.0 and out["test/acc_std"] == 25.0
    assert out["test/acc_pooled"] == 100.0 * 2 / 3 and out["test/loss_mean"] == 0.3
    assert out["test/clients_missing"] == 1.0
    assert out["test/acc_client0"] == 50.0 and math.isnan(out["test/acc_client1"])
    full = accuracy_metrics(np.array([50.0]), np.array([1]), np.array([2]), np.array([0.5]))
    assert "test/clients_missing" not in full


def test_clients_without_test_samples_are_missing_in_every_file(tmp_path, caplog):
    """One test image (class 0) for three clients: two have none."""
    write_mnist_family(tmp_path / "d" / "MNIST" / "raw", n_train=(4, 4, 4), n_test=(1, 0, 0))
    cfg = small_cfg(rounds=2, num_clients=3, clients_per_round=2, log_clients_every=1,
                    data={"name": "mnist", "input_shape": [1, 28, 28], "num_classes": 10,
                          "normalize": "unit", "download": False},
                    partition={"name": "iid", "seed": 0})
    run(dict(cfg, data_dir=str(tmp_path / "d")), tmp_path / "run")
    clients = pd.read_csv(tmp_path / "run" / "clients.csv")
    empty = clients["num_test"] == 0
    assert empty.sum() == 2
    assert clients.loc[empty, ["accuracy", "loss"]].isna().all().all()
    assert clients.loc[~empty, ["accuracy", "loss"]].notna().all().all()
    rows = pd.read_csv(tmp_path / "run" / "rounds.csv")
    assert (rows["test/clients_missing"] == 2).all()
    k = int(clients.index[~empty][0])
    assert (rows["test/acc_mean"] == rows[f"test/acc_client{k}"]).all()   # the one client
    assert rows[[f"test/acc_client{i}" for i in clients.index[empty]]].isna().all().all()
    per_round = pd.read_csv(tmp_path / "run" / "clients_rounds.csv")
    assert per_round.loc[per_round["client"].isin(clients.index[empty]), "test_accuracy"].isna().all()
    assert "2 of 3 clients have no test samples" in caplog.text


def test_a_partition_without_any_test_sample_is_refused(tmp_path):
    r = run_main(["run", *SMALL, "partition.split=pooled", "partition.fractions=[1.0,0.0,0.0]",
                  "hydra.run.dir=run"], tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "gives no client any test samples" in lines[0], lines
    assert not (tmp_path / "run" / "rounds.csv").exists()
