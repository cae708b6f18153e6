"""Every model whose numbers a run reports takes part in the divergence check (Ditto's personal
models, not only the global one), and a row whose losses are not numbers is divergence."""

from __future__ import annotations

import math

import pytest

from fedmoo.errors import DivergenceError
from fedmoo.run import evaluation
from fedmoo.run.loop import run
from tests.conftest import small_cfg
from tests.reliability.helpers import rows_without_time, summary
from tests.reliability.test_divergence import corrupt_round

DITTO = {"name": "ditto", "lam": 1.0}


def _kept_rows(run_dir, n: int) -> None:
    rows = rows_without_time(run_dir / "rounds.csv")
    assert [int(r["round"]) for r in rows] == list(range(1, n + 1))
    assert all(math.isfinite(float(v)) for r in rows for v in r.values() if v)
    s = summary(run_dir)
    assert s["status"] == "diverged" and s["rounds_completed"] == n
    assert not (run_dir / "model.pt").exists() and not (run_dir / "clients.csv").exists()


@pytest.mark.parametrize("limit", [1e6, None])
def test_a_personal_model_that_is_not_finite_is_divergence(tmp_path, monkeypatch, limit):
    """The global model stays finite: only the check of the evaluated models sees it."""
    corrupt_round(monkeypatch, 3, lambda c: c.personal[0].fill_(float("inf")))
    with pytest.raises(DivergenceError, match="diverged in round 3: a per-client model is not "
                                              "finite; lower client.lr .* algo"):
        run(small_cfg(rounds=5, algo=DITTO, diverge_norm=limit), tmp_path)
    _kept_rows(tmp_path, 2)


def test_a_personal_model_past_diverge_norm_is_divergence(tmp_path, monkeypatch):
    corrupt_round(monkeypatch, 2, lambda c: c.personal[1].mul_(1e9))
    with pytest.raises(DivergenceError, match=r"round 2: a per-client model's norm \d.*e\+\d+ "
                                              "exceeds diverge_norm=1e"):
        run(small_cfg(rounds=4, algo=DITTO, diverge_norm=1e6), tmp_path)
    _kept_rows(tmp_path, 1)


def test_dittos_strong_personalisation_diverges_unaided(tmp_path):
    """lam * lr = 50: the personal models' step overshoots (the issue's ``algo.lam=1000``)."""
    with pytest.raises(DivergenceError, match="a per-client model"):
        run(small_cfg(rounds=3, algo={"name": "ditto", "lam": 1000.0}, diverge_norm=None),
            tmp_path)
    assert summary(tmp_path)["status"] == "diverged"


def test_a_row_whose_loss_is_not_a_number_is_divergence(tmp_path, monkeypatch):
    """A finite model whose logits overflow reports a NaN loss: not a result."""
    real, calls = evaluation.evaluate_clients, []

    def evaluate(*a, **k):
        ev = real(*a, **k)
        calls.append(1)
        if len(calls) == 2:
            ev.loss[0] = float("nan")
        return ev

    monkeypatch.setattr(evaluation, "evaluate_clients", evaluate)
    with pytest.raises(DivergenceError, match="round 2: test/loss_mean is not finite"):
        run(small_cfg(rounds=4, track_improved=False), tmp_path)
    _kept_rows(tmp_path, 1)
