"""Run-level behaviour: num_clients null, the FMOL stationarity measure, overflowing updates."""

from __future__ import annotations

import json

import pytest
import torch

from fedmoo import data as fdata, models
from fedmoo.engine.common import sample_losses
from fedmoo.errors import DivergenceError, UserError
from fedmoo.run.loop import check_diverged
from fedmoo.config.schema import check, cohort
from fedmoo.run.loop import run
from tests.conftest import small_cfg


# -- num_clients: null = the dataset's own clients ----------------------------------------------
def test_num_clients_null_takes_the_natural_clients(tmp_path):
    cfg = small_cfg(num_clients=None)
    check(cfg)
    assert cohort(cfg) == (None, 3)
    res = run(small_cfg(num_clients=None, rounds=2), tmp_path)     # data.num_users = 6
    assert res.status == "completed" and len(res.rows) == 2
    assert json.loads((tmp_path / "summary.json").read_text())["num_clients"] == 6


def test_num_clients_null_checks_the_cohort_once_the_count_is_known(tmp_path):
    with pytest.raises(UserError, match="clients_per_round=7 is larger than num_clients=6"):
        run(small_cfg(num_clients=None, clients_per_round=7), tmp_path / "a")
    with pytest.raises(UserError, match="num_clients=null .* needs partition=natural"):
        run(small_cfg(num_clients=None, partition={"name": "iid", "seed": 0}), tmp_path / "b")


# -- FMGDA: ||lambda_t^T grad F(x_t)||^2 at evaluated rounds ------------------------------------
def test_fmgda_logs_the_papers_stationarity_measure(tmp_path):
    algo = {"name": "fmgda", "local_steps": 2, "eta": 0.05, "qp_on": "trunk",
            "weighting": "uniform", "solver": "daqp"}
    res = run(small_cfg(algo=algo, rounds=2), tmp_path)
    first = res.rows[0]
    # single-task data: one objective, lambda = 1, F = mean over all 6 clients of their mean
    # training loss, measured at x_0 (the initial model), by hand with autograd
    cfg = small_cfg()
    fed = fdata.load_federated(cfg["data"], cfg["partition"], 6, "./data")
    torch.manual_seed(0)
    model = models.build(cfg["model"], fed.input_shape, fed.num_classes)
    model.eval()
    f = sum(sample_losses(model(fed.x[fed.train.of(k)]), fed.y[fed.train.of(k)], fed.task).mean()
            for k in range(6)) / 6
    grads = torch.autograd.grad(f, [p for p in model.parameters() if p.requires_grad])
    want = float(sum(g.double().square().sum() for g in grads))
    assert first["train/lambda_grad_norm_sq"] == pytest.approx(want, rel=1e-5)
    assert first["server/lambda_task0"] == 1.0
    # the other measure sums K = 2 local gradients: about K^2 = 4 times larger here
    assert 2.0 < first["server/d_norm_sq"] / first["train/lambda_grad_norm_sq"] < 4.5
    assert all("server/min_cos" in r and "server/harmed" in r for r in res.rows)


# -- overflow: never a silent skip ---------------------------------------------------------------
def test_non_finite_updates_stop_the_run_as_diverged():
    cfg = small_cfg()
    w = {"the global model": torch.zeros(3)}
    check_diverged(w, [torch.ones(2), None], 1, cfg, torch.ones(2, 3))
    with pytest.raises(DivergenceError, match="a client's update is not finite"):
        check_diverged(w, [torch.ones(2)], 1, cfg, torch.tensor([[1.0, float("inf"), 0.0]]))
    with pytest.raises(DivergenceError, match="training loss is not finite"):
        check_diverged(w, [torch.ones(2), torch.tensor([float("nan")])], 1, cfg)
    # a float32 model of norm 1e20 is finite: its norm is taken in float64
    with pytest.raises(DivergenceError, match="norm 1e\\+20 exceeds diverge_norm"):
        check_diverged({"the global model": torch.tensor([1e20, 0.0])}, [], 1,
                       cfg | {"diverge_norm": 1e6})
