"""FMGDA / FSMGDA server rule: indicator-matrix averaging, the S-task QP, the FedAvg reduction."""

from __future__ import annotations

import csv

import pytest
import torch

from fedmoo.algorithms import build, get
from fedmoo.errors import UserError
from fedmoo.run.loop import run
from fedmoo.state import Cohort
from tests.conftest import small_cfg

T = dict(dtype=torch.float64)


def fmol_cohort() -> Cohort:
    """3 clients, 3 tasks, d = 5: coordinates 0-1 trunk, 2/3/4 the heads of tasks 0/1/2.

    Client 0 holds task 0, client 1 tasks 0 and 1, client 2 task 1; nobody holds task 2.
    Entries of pairs a client does not hold are garbage (99) and must be ignored.
    """
    deltas = torch.full((3, 3, 5), 99.0, **T)
    deltas[0, 0] = torch.tensor([2.0, 0.0, 1.0, 0.0, 0.0])
    deltas[1, 0] = torch.tensor([2.0, 0.0, 3.0, 0.0, 0.0])   # task 0 mean (2, 0 | 2, 0, 0)
    deltas[1, 1] = torch.tensor([0.0, 1.0, 0.0, 4.0, 0.0])
    deltas[2, 1] = torch.tensor([0.0, 1.0, 0.0, 2.0, 0.0])   # task 1 mean (0, 1 | 0, 3, 0)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=torch.bool)
    return Cohort(client_ids=torch.arange(3), deltas=deltas, loss_before=torch.ones(3, **T),
                  task_mask=mask, shared=torch.tensor([True, True, False, False, False]),
                  local_lr=0.1)


@pytest.mark.parametrize("name", ["fmgda", "fsmgda"])
def test_indicator_averaging_qp_on_trunk_and_unheld_task_left_unchanged(name):
    algo = build({"name": name, "eta": 0.5})
    w0 = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0], **T)
    state, diag = algo.server_update(algo.init(w0, num_clients=3), fmol_cohort())
    # trunk QP on (2,0) and (0,1): lambda = (1/5, 4/5, 0); d = (0.4, 0.8 | 0.4, 2.4, 0)
    d = torch.tensor([0.4, 0.8, 0.4, 2.4, 0.0], **T)
    torch.testing.assert_close(state.w, w0 - 0.5 * d, atol=1e-9, rtol=0)
    assert state.w[4] == 1.0                       # task 2's head: held by no one, unchanged
    assert diag["server/lambda_task2"] == 0.0 and diag["server/tasks_present"] == 2.0
    assert diag["server/lambda_task0"] == pytest.approx(0.2, abs=1e-9)
    assert diag["server/d_norm_sq"] == pytest.approx(float(d @ d), abs=1e-9)
    assert diag["server/d_norm"] == pytest.approx(float(d.norm()), abs=1e-9)


def test_qp_on_all_parameters_includes_the_heads():
    algo = get("fmgda")(eta=1.0, qp_on="all")
    w0 = torch.zeros(5, **T)
    state, diag = algo.server_update(algo.init(w0, num_clients=3), fmol_cohort())
    # G = [[8, 0], [0, 10]] -> lambda = (5/9, 4/9)
    d = 5 / 9 * torch.tensor([2.0, 0, 2, 0, 0], **T) + 4 / 9 * torch.tensor([0, 1.0, 0, 3, 0], **T)
    torch.testing.assert_close(state.w, -d, atol=1e-9, rtol=0)


def test_single_task_cohort_is_one_objective_held_by_all():
    algo = get("fmgda")(eta=0.1, weighting="samples")
    cohort = Cohort(client_ids=torch.arange(2), deltas=torch.tensor([[1.0, 0.0], [0.0, 2.0]], **T),
                    num_samples=torch.tensor([1.0, 3.0], **T))
    state, _ = algo.server_update(algo.init(torch.zeros(2, **T), 2), cohort)
    torch.testing.assert_close(state.w, -0.1 * torch.tensor([0.25, 1.5], **T))


@pytest.mark.parametrize("kwargs,needle", [
    ({"local_steps": 0}, "algo.local_steps=0"),
    ({"eta": 0.0}, "algo.eta=0.0"),
    ({"qp_on": "heads"}, "algo.qp_on='heads'"),
    ({"weighting": "loss"}, "algo.weighting='loss'"),
    ({"stationarity_every": -1}, "algo.stationarity_every=-1"),
])
def test_bad_hyperparameters_are_user_errors(kwargs, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        get("fmgda")(**kwargs)


@pytest.mark.parametrize("every,rounds", [(1, [1, 2, 3, 4, 5, 6]), (3, [3, 6]), (0, [])])
def test_stationarity_is_measured_on_multiples_of_stationarity_every(every, rounds):
    algo = get("fmgda")(stationarity_every=every)
    state = algo.init(torch.zeros(5, **T), num_clients=3)
    assert algo.gradient_probe(state) is None                  # no lambda before round 1
    measured = []
    for t in range(1, 7):
        state, _ = algo.server_update(state, fmol_cohort())
        assert state.round == t
        if algo.gradient_probe(state) is not None:
            measured.append(t)
    assert measured == rounds


def test_fsmgda_on_single_task_data_with_eta_equal_local_lr_is_fedavg(tmp_path):
    """Same batches (K local steps, batch 10) and d = sum p_k (w - x_k) / lr, stepped by lr."""
    common = {"client.local_steps": 3, "client.lr": 0.05, "rounds": 2}
    run(small_cfg(**common), tmp_path / "avg")
    run(small_cfg(**common, algo={"name": "fsmgda", "local_steps": 3, "eta": 0.05,
                                  "qp_on": "trunk", "weighting": "samples", "solver": "daqp"}),
        tmp_path / "fsmgda")
    rows = [list(csv.DictReader(open(tmp_path / r / "rounds.csv"))) for r in ("avg", "fsmgda")]
    for a, b in zip(*rows):
        for key in ("test/acc_mean", "test/loss_mean", "train/loss_mean"):
            assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-5), key
