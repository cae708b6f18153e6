"""Every algorithm trains end to end on data=synthetic, through the runner and the CLI."""

from __future__ import annotations

import csv
import json
import math

import pytest

from fedmoo.algorithms import names
from fedmoo.run.loop import run
from tests.algorithms.test_registry import yaml_algo
from tests.conftest import small_cfg
from tests.inprocess import cli_in

TIME_COLS = ("time/round_s", "time/elapsed_s")
SMALL = ("num_clients=8", "clients_per_round=4", "data.max_samples=100", "progress=false")


def rows_of(path, drop=()):
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


@pytest.mark.parametrize("name", names())
def test_every_algorithm_runs_on_synthetic(tmp_path, name):
    # Prepare: the algorithm's own YAML; 6 clients, 5 per round (AFL: all of them)
    cfg = small_cfg(rounds=2, clients_per_round=None if name == "afl" else 5,
                    algo=yaml_algo(name, rounds=2))
    # Execute
    res = run(cfg, tmp_path)
    # Assert
    assert res.status == "completed" and [r["round"] for r in res.rows] == [1, 2]
    final = res.rows[-1]
    assert all(math.isfinite(v) for v in final.values() if isinstance(v, float))
    assert final["server/d_norm"] > 0
    assert json.loads((tmp_path / "summary.json").read_text())["algo"] == name
    if name == "ditto":
        assert "global/acc_mean" in final


def test_fedprox_with_mu_zero_trains_exactly_like_fedavg(tmp_path):
    run(small_cfg(), tmp_path / "avg")
    run(small_cfg(algo={"name": "fedprox", "mu": 0.0, "weighting": "samples", "eta": 1.0}),
        tmp_path / "prox")
    assert (rows_of(tmp_path / "avg" / "rounds.csv", TIME_COLS)
            == rows_of(tmp_path / "prox" / "rounds.csv", TIME_COLS))


@pytest.mark.slow
def test_cli_lists_and_runs_algorithms(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("list", "algo")
    assert r.returncode == 0
    for name in names():
        assert f"  {name} " in r.stdout
    r = cli("run", "algo=fedmgda_plus", "rounds=2", "algo.epsilon=0.5", *SMALL, "hydra.run.dir=out")
    assert r.returncode == 0, r.stderr
    summary = json.loads((cli.cwd / "out" / "summary.json").read_text())
    assert summary["hparams"]["epsilon"] == 0.5 and "total_rounds" not in summary["hparams"]
    assert "server/lambda_max" in rows_of(cli.cwd / "out" / "rounds.csv")[0]


@pytest.mark.slow
def test_cli_runs_ditto_and_rejects_afl_with_partial_participation(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("run", "algo=ditto", "rounds=2", *SMALL, "hydra.run.dir=ditto")
    assert r.returncode == 0, r.stderr
    assert "global/acc_mean" in rows_of(cli.cwd / "ditto" / "rounds.csv")[0]
    r = cli("run", "algo=afl", "rounds=2", "hydra.run.dir=afl")
    assert r.returncode == 2
    expected = ("fedmoo: error: algo=afl needs full participation but clients_per_round=10 < "
                "num_clients=30; set clients_per_round=null")
    assert r.stderr.strip().splitlines() == [expected]
