"""Several runs' models evaluated on one split at once (a lockstep group's evaluated round)
give each run's own evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedmoo.engine.base import LocalSGD
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.evaluate import evaluate_clients
from fedmoo.engine import evaluate_many
from fedmoo.engine.evaluate_many import evaluate_models
from fedmoo.models.linear import MLP, LogReg
from fedmoo.params import get_flat
from tests.engine.helpers import SmallCNN, TinyLSTM, federation


@pytest.mark.parametrize("softmax_output", [False, True])
@pytest.mark.parametrize("split", ["train", "test"])
def test_models_together_as_each_alone(softmax_output, split):
    torch.manual_seed(4)
    data = federation([7, 13, 4, 10], (2, 3), 4)
    model = LogReg((2, 3), 4, softmax_output=softmax_output).double()
    engine = BatchedEngine(model, data, LocalSGD(lr=0.1, batch_size=4))
    w = get_flat(model)
    params = [w + 0.5 * torch.randn_like(w) for _ in range(3)]
    got = evaluate_models(engine, data, split, params)
    assert got is not None and len(got) == 3
    for p, ev in zip(params, got):
        ref = evaluate_clients(model, data, split, p)
        for name in ("acc", "loss", "count", "correct"):
            np.testing.assert_allclose(getattr(ev, name), getattr(ref, name), rtol=1e-12,
                                       atol=1e-12, err_msg=name)
    assert got[0].count.tolist() == data.split(split).sizes.tolist()
    assert not np.allclose(got[0].loss, got[1].loss)        # three different models


def test_a_cohort_subset_as_each_alone():
    """The improved-clients share reads the new global models' loss on the cohort only."""
    torch.manual_seed(5)
    data = federation([7, 13, 4, 10, 5], (2, 3), 4)
    model = LogReg((2, 3), 4).double()
    engine = BatchedEngine(model, data, LocalSGD(lr=0.1, batch_size=4))
    w = get_flat(model)
    params = [w + 0.5 * torch.randn_like(w) for _ in range(2)]
    ids = torch.tensor([3, 0, 4])
    got = evaluate_models(engine, data, "train", params, ids)
    for p, ev in zip(params, got):
        ref = evaluate_clients(model, data, "train", p, clients=ids)
        for name in ("acc", "loss", "count", "correct"):
            np.testing.assert_allclose(getattr(ev, name), getattr(ref, name), rtol=1e-12,
                                       atol=1e-12, err_msg=name)
    assert got[0].count.tolist() == [7, 0, 0, 10, 5]   # clients 0, 3 and 4 of sizes 7, 10, 5


class DropNet(nn.Module):
    """conv -> ReLU -> dropout -> linear: evaluation must run without dropout."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(3 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(self.drop(torch.relu(self.conv(x))).flatten(1))


@pytest.mark.parametrize("family", ["mlp", "cnn", "dropout"])
@pytest.mark.parametrize("subset", [False, True])
def test_lockstep_models_together_as_each_alone(family, subset, monkeypatch):
    """Models the lockstep program runs (MLPs, conv nets): M stacked rows on each chunk (on
    CUDA by default; here on the CPU)."""
    monkeypatch.setattr(evaluate_many, "STACKED_ON_CPU", True)
    make, shape = {"mlp": (lambda: MLP((2, 3), 3, hidden=(5, 4)), (2, 3)),
                   "cnn": (lambda: SmallCNN(), (2, 8, 8)),
                   "dropout": (lambda: DropNet(), (2, 4, 4))}[family]
    torch.manual_seed(6)
    data = federation([7, 13, 4, 10, 5], shape, 3)
    model = make().double()
    engine = BatchedEngine(model, data, LocalSGD(lr=0.1, batch_size=4))
    assert engine.program is not None and engine.head is None
    w = get_flat(model)
    params = [w + 0.3 * torch.randn_like(w) for _ in range(3)]
    ids = torch.tensor([3, 0, 4]) if subset else None
    got = evaluate_models(engine, data, "train", params, ids)
    assert got is not None and len(got) == 3
    for p, ev in zip(params, got):
        ref = evaluate_clients(model, data, "train", p, clients=ids)
        for name in ("acc", "loss", "count", "correct"):
            np.testing.assert_allclose(getattr(ev, name), getattr(ref, name), rtol=1e-12,
                                       atol=1e-12, err_msg=name)
    assert not np.allclose(got[0].loss, got[1].loss)
    assert model.training                                   # left as it was


def test_on_a_cpu_lockstep_models_evaluate_alone_by_default():
    data = federation([5, 6], (2, 3), 3)
    engine = BatchedEngine(MLP((2, 3), 3, hidden=(4,)).double(), data,
                           LocalSGD(lr=0.1, batch_size=4))
    w = get_flat(engine.model)
    assert evaluate_models(engine, data, "test", [w, w]) is None


def test_models_the_vmap_program_trains_evaluate_alone(monkeypatch):
    monkeypatch.setattr(evaluate_many, "STACKED_ON_CPU", True)
    data = federation([5, 6], (5,), 5, tokens=True)
    engine = BatchedEngine(TinyLSTM().double(), data, LocalSGD(lr=0.1, batch_size=4))
    assert engine.program is None
    w = get_flat(engine.model)
    assert evaluate_models(engine, data, "test", [w, w]) is None
