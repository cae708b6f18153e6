"""The round loop through the Python API (no subprocess)."""

from __future__ import annotations

import csv

import pytest

from fedmoo.errors import UserError
from fedmoo.run.loop import run
from fedmoo.run.sampler import ClientSampler
from tests.conftest import small_cfg

TIME_COLS = ("time/round_s", "time/elapsed_s")


def _rows_without_time(path):
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIME_COLS} for r in csv.DictReader(f)]


def test_same_config_and_seed_give_identical_rounds_csv(tmp_path):
    run(small_cfg(), tmp_path / "a")
    run(small_cfg(), tmp_path / "b")
    a, b = _rows_without_time(tmp_path / "a" / "rounds.csv"), _rows_without_time(tmp_path / "b" / "rounds.csv")
    assert a == b and len(a) == 3


def test_other_seed_gives_other_rounds(tmp_path):
    run(small_cfg(), tmp_path / "a")
    run(small_cfg(seed=1), tmp_path / "b")
    assert _rows_without_time(tmp_path / "a" / "rounds.csv") != _rows_without_time(tmp_path / "b" / "rounds.csv")


def test_eval_every_controls_rows(tmp_path):
    res = run(small_cfg(rounds=5, eval_every=2), tmp_path)
    assert [r["round"] for r in res.rows] == [2, 4, 5]


def test_sampler_is_per_round_reproducible():
    s = ClientSampler(30, 10, seed=4)
    a = s.sample(7)
    assert a.tolist() == ClientSampler(30, 10, seed=4).sample(7).tolist()
    assert len(set(a.tolist())) == 10 and a.tolist() == sorted(a.tolist())
    assert ClientSampler(5, 5, 0).sample(0).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("key,value,needle", [
    ("clients_per_round", 7, "clients_per_round=7 is larger than num_clients=6"),
    ("rounds", "abc", "rounds='abc'"),
    ("client.lr", -1.0, "client.lr=-1.0"),
])
def test_bad_run_knobs_raise_user_error(tmp_path, key, value, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        run(small_cfg(**{key: value}), tmp_path)


def test_training_improves_accuracy(tmp_path):
    res = run(small_cfg(rounds=15, clients_per_round=None), tmp_path)
    assert res.rows[-1]["test/acc_mean"] > res.rows[0]["test/acc_mean"]
    assert res.rows[-1]["train/loss_mean"] < res.rows[0]["train/loss_mean"]
