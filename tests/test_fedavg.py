"""FedAvg's server rule on hand-computed examples."""

from __future__ import annotations

import pytest
import torch

from fedmoo.algorithms import get
from fedmoo.errors import UserError
from fedmoo.state import Cohort


def _cohort(**kw):
    base = dict(
        client_ids=torch.tensor([0, 1]),
        deltas=torch.tensor([[1.0, -2.0], [4.0, 2.0]], dtype=torch.float64),
        num_samples=torch.tensor([1.0, 3.0], dtype=torch.float64),
    )
    base.update(kw)
    return Cohort(**base)


def test_sample_weighted_average_by_hand():
    algo = get("fedavg")()
    state = algo.init(torch.tensor([10.0, 10.0], dtype=torch.float64), num_clients=2)
    new, diag = algo.server_update(state, _cohort())
    # d = 1/4 (1, -2) + 3/4 (4, 2) = (3.25, 1.0); w = (10, 10) - d
    assert torch.allclose(new.w, torch.tensor([6.75, 9.0], dtype=torch.float64))
    assert new.round == 1 and state.round == 0
    assert diag["server/d_norm"] == pytest.approx((3.25**2 + 1.0) ** 0.5)


def test_uniform_weighting_and_server_lr():
    algo = get("fedavg")(weighting="uniform", eta=0.5)
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=2)
    new, _ = algo.server_update(state, _cohort())
    # d = (2.5, 0); w = 0 - 0.5 d
    assert torch.allclose(new.w, torch.tensor([-1.25, 0.0], dtype=torch.float64))


def test_state_is_not_mutated():
    algo = get("fedavg")()
    w0 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    state = algo.init(w0, num_clients=2)
    algo.server_update(state, _cohort())
    assert torch.equal(state.w, w0)


@pytest.mark.parametrize("kw,needle", [({"weighting": "mean"}, "algo.weighting"),
                                        ({"eta": 0.0}, "algo.eta")])
def test_bad_hyperparameters(kw, needle):
    with pytest.raises(UserError, match=needle):
        get("fedavg")(**kw)
