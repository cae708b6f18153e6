"""A diverging run stops with status 3, keeps its good rows and says `diverged` in summary.json."""

from __future__ import annotations

import math

import pytest
import torch

from fedmoo import engine as fengine
from fedmoo.errors import DivergenceError
from fedmoo.run.loop import check_diverged
from fedmoo.run.loop import run
from tests.conftest import small_cfg
from tests.inprocess import cli_in
from tests.reliability.helpers import ONE_THREAD, SMALL, rows_without_time, summary


def corrupt_round(monkeypatch, round_no: int, corrupt) -> list[bool]:
    """Every built engine's cohort of round ``round_no`` goes through ``corrupt``; returns the
    rounds' ``spec.measure_before`` as they train."""
    real_build, measured = fengine.build, []

    def build(*args, **kw):
        eng = real_build(*args, **kw)

        def train(ids, w, spec, seed, _train=eng.train):
            measured.append(spec.measure_before)
            cohort = _train(ids, w, spec, seed)
            if len(measured) == round_no:
                corrupt(cohort)
            return cohort

        eng.train = train
        return eng

    monkeypatch.setattr(fengine, "build", build)
    return measured


def test_nan_in_round_3_keeps_rows_1_2(tmp_path, monkeypatch):
    corrupt_round(monkeypatch, 3, lambda c: c.deltas[0].fill_(float("nan")))   # a NaN update
    # the NaN update is caught before the rule reads it (it used to surface as a NaN model)
    with pytest.raises(DivergenceError, match="diverged in round 3: a client's update is not "
                                              r"finite \(it overflowed in local training\); "
                                              "lower client.lr"):
        run(small_cfg(rounds=5), tmp_path)
    rows = rows_without_time(tmp_path / "rounds.csv")
    assert [r["round"] for r in rows] == ["1", "2"]
    assert all(math.isfinite(float(v)) for r in rows for v in r.values() if v)
    s = summary(tmp_path)
    assert s["status"] == "diverged" and s["rounds_completed"] == 2
    assert s["final"]["round"] == 2 and "round 3" in s["message"]
    assert not (tmp_path / "clients.csv").exists() and not (tmp_path / "model.pt").exists()


@pytest.mark.parametrize("w,losses,limit,needle", [
    ([1.0, float("inf")], [0.5], None, "the global model is not finite"),
    ([1.0, 2.0], [0.5, float("nan")], None, "the clients' training loss is not finite"),
    ([3.0, 4.0], [0.5], 4.9, "the global model's norm 5 exceeds diverge_norm=4.9"),
])
def test_divergence_rules(w, losses, limit, needle):
    cfg = small_cfg(diverge_norm=limit)
    with pytest.raises(DivergenceError, match=needle):
        check_diverged({"the global model": torch.tensor(w)}, [torch.tensor(losses)], 4, cfg)
    check_diverged({"the global model": torch.tensor([3.0, 4.0])}, [torch.tensor([0.5])], 4,
                   small_cfg(diverge_norm=5.0))


@pytest.mark.slow
def test_huge_learning_rate_from_the_cli(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("run", *SMALL, "rounds=4", "client.lr=1e6", "hydra.run.dir=out", env=ONE_THREAD)
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedmoo: error: training diverged in round 1")
    assert "diverge_norm=1e+06" in lines[0] and "client.lr (now 1000000.0)" in lines[0]
    s = summary(cli.cwd / "out")
    assert s["status"] == "diverged" and s["rounds_completed"] == 0
    assert rows_without_time(cli.cwd / "out" / "rounds.csv") == []


def test_a_non_finite_training_loss_stops_a_round_that_writes_no_row(tmp_path, monkeypatch):
    """Rounds without a row skip the loss_before pass (FedAvg does not read it); the loss of the
    last local epoch, measured anyway, is checked in its place."""
    measured = corrupt_round(monkeypatch, 2, lambda c: c.loss_after.fill_(float("inf")))
    with pytest.raises(DivergenceError, match="diverged in round 2: the clients' training loss "
                                              "is not finite"):
        run(small_cfg(rounds=5, eval_every=4), tmp_path)
    assert measured == [False, False] and summary(tmp_path)["status"] == "diverged"
