"""round/improved_frac and clients_rounds.csv."""

from __future__ import annotations

import csv

import torch

from fedmoo import data as fdata, models
from fedmoo.engine.common import forward_stats
from fedmoo.engine.evaluate import improved_fraction
from fedmoo.params import get_flat
from fedmoo.run.loop import run
from tests.conftest import small_cfg


def _setup():
    cfg = small_cfg()
    fed = fdata.load_federated(cfg["data"], cfg["partition"], 6, "./data")
    torch.manual_seed(0)
    model = models.build(cfg["model"], fed.input_shape, fed.num_classes)
    return fed, model


def test_improved_fraction_by_hand():
    fed, model = _setup()
    w = get_flat(model)
    ids = torch.tensor([0, 2, 5])
    before = torch.stack([forward_stats(model, fed.x, fed.y, fed.train.of(k), fed.task)[0].mean()
                          for k in ids.tolist()])
    # the same model: every loss ties -> all count as improved
    assert improved_fraction(model, fed, w, ids, before) == 1.0
    # claim the clients had a loss far below anything reachable -> nobody improved
    assert improved_fraction(model, fed, w, ids, before - 10.0) == 0.0
    # one client's recorded loss is lower than its loss at w_new -> 2 of 3 improved
    before[1] -= 10.0
    assert abs(improved_fraction(model, fed, w, ids, before) - 2 / 3) < 1e-12


def test_rounds_csv_has_improved_frac_and_clients_rounds(tmp_path):
    run(small_cfg(rounds=4, log_clients_every=2), tmp_path)
    with open(tmp_path / "rounds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    fr = [float(r["round/improved_frac"]) for r in rows]
    assert all(0.0 <= v <= 1.0 for v in fr)
    assert all(abs(v * 3 - round(v * 3)) < 1e-9 for v in fr)   # K = 3 participants
    with open(tmp_path / "clients_rounds.csv", newline="") as f:
        per_client = list(csv.DictReader(f))
    assert [int(r["round"]) for r in per_client] == [2] * 6 + [4] * 6
    assert [int(r["client"]) for r in per_client[:6]] == list(range(6))
    last = {int(r["client"]): float(r["test_accuracy"]) for r in per_client if r["round"] == "4"}
    with open(tmp_path / "clients.csv", newline="") as f:
        final = {int(r["client"]): float(r["accuracy"]) for r in csv.DictReader(f)}
    assert last == final



def test_clients_csv_is_the_last_rounds_evaluation_not_a_second_one(tmp_path, monkeypatch):
    from fedmoo.run import evaluation
    calls = []
    real = evaluation.evaluate_clients
    monkeypatch.setattr(evaluation, "evaluate_clients",
                        lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    run(small_cfg(rounds=3, eval_every=2, track_improved=False), tmp_path)
    assert calls == ["test", "test"]        # rounds 2 and 3 (the last always evaluates)
    with open(tmp_path / "clients.csv", newline="") as f:
        acc = [float(r["accuracy"]) for r in csv.DictReader(f)]
    fed, model = _setup()                   # the saved final model, evaluated afresh
    model.load_state_dict(torch.load(tmp_path / "model.pt"))
    assert acc == [float(a) for a in real(model, fed, "test", get_flat(model)).acc]
