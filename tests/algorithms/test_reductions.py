"""Settings that reduce a rule to FedAvg (uniform or sample-weighted) give FedAvg's new model."""

from __future__ import annotations

import pytest
import torch

from fedmoo.algorithms import build, get
from tests.algorithms.cohorts import make_cohort, one_round

GEN = torch.Generator().manual_seed(7)
DELTAS = torch.randn(5, 8, generator=GEN, dtype=torch.float64)
W0 = torch.randn(8, generator=GEN, dtype=torch.float64)


def new_w(algo, **cohort_kw):
    cohort = make_cohort(DELTAS, **cohort_kw)
    return one_round(algo, cohort, w0=W0)[1].w


UNIFORM = new_w(get("fedavg")(weighting="uniform"))
WEIGHTED = new_w(get("fedavg")(weighting="samples"))


def test_fedavg_references_are_what_they_claim():
    torch.testing.assert_close(UNIFORM, W0 - DELTAS.mean(0))
    n = torch.arange(1, 6, dtype=torch.float64) * 10
    torch.testing.assert_close(WEIGHTED, W0 - (n / n.sum()) @ DELTAS)


@pytest.mark.parametrize("name,hparams,reference", [
    ("qfedavg", {"q": 0.0}, "uniform"),
    ("fedmgda", {"epsilon": 0.0, "normalize": False, "eta": 1.0}, "uniform"),
    ("fedmgda", {"epsilon": 0.0, "normalize": False, "eta": 1.0, "lambda0": "samples"}, "weighted"),
    ("fedfv", {"alpha": 1.0, "tau": 0}, "uniform"),
    ("fedprox", {"mu": 0.0}, "weighted"),
    ("term", {"t": 0.0, "normalization": "softmax"}, "uniform"),
    ("afl", {"gamma_lambda": 0.0, "average_iterates": False}, "uniform"),
    ("trimmed_mean", {"beta": 0.0}, "uniform"),
    ("multikrum", {"f": 1, "m": 5}, "uniform"),
])
def test_reduces_to_fedavg(name, hparams, reference):
    algo = build({"name": name, **hparams})
    w = algo.eval_params(one_round(algo, make_cohort(DELTAS), w0=W0)[1])
    torch.testing.assert_close(w, UNIFORM if reference == "uniform" else WEIGHTED, atol=1e-12, rtol=0)


def test_ditto_global_model_is_uniform_fedavg():
    algo = get("ditto")(lam=0.5)
    personal = torch.zeros(5, 8, dtype=torch.float64)
    state = one_round(algo, make_cohort(DELTAS, personal=personal), w0=W0)[1]
    torch.testing.assert_close(algo.extra_eval_params(state)["global"], UNIFORM)


def test_fedavg_n_is_the_mean_of_normalised_updates():
    cohort = make_cohort([[3.0, 0.0], [0.0, -2.0]])
    _, state, _ = one_round(build({"name": "fedavg_n"}), cohort)
    torch.testing.assert_close(state.w, torch.tensor([-0.5, 0.5], dtype=torch.float64))


def test_fedprox_and_mgda_prox_ask_the_clients_for_the_proximal_term():
    ids = torch.arange(3)
    assert get("fedprox")(mu=0.3).client_spec(None, ids).prox_mu == 0.3
    # the authors' prox_weight 0.1 multiplies ||w - w_t||^2 without 1/2: fedmoo's mu = 0.2
    assert build({"name": "mgda_prox"}).client_spec(None, ids).prox_mu == 0.2
    assert build({"name": "fedmgda_plus"}).client_spec(None, ids).prox_mu == 0.0


def test_fedmgda_step_decays_by_the_total_factor():
    algo = build({"name": "fedmgda_plus", "eta": 2.0, "eta_decay": 0.01}, rounds=200)
    # beta = 0.01^(100/200) = 0.1 per 100 rounds
    assert [algo.step_size(t) for t in (0, 99, 100, 199, 200)] == pytest.approx(
        [2.0, 2.0, 0.2, 0.2, 0.02])
    assert get("fedmgda")().step_size(10_000) == 1.0
