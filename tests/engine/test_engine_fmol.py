"""Per-task training (FMGDA / FSMGDA): both engines agree, and the deltas are what the paper says."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from fedmoo.data.federated import ClientSplit, FederatedData
from fedmoo.engine.common import sample_losses
from fedmoo.models.multitask import MTLMLP, param_tasks
from fedmoo.params import get_flat, set_flat
from fedmoo.state import ClientSpec, TaskTraining
from tests.engine.helpers import both, rel

TOL = 1e-10
SIZES = [7, 13, 4, 10, 9]
# client 2 holds no task 1, client 4 only task 1; task 2 is held by clients 0 and 3
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.bool)


def multitask_federation(regression: bool = False, seed: int = 0) -> FederatedData:
    g = torch.Generator().manual_seed(seed)
    n_train, n_clients = sum(SIZES), len(SIZES)
    total = n_train + 3 * n_clients
    x = torch.randn(total, 6, generator=g, dtype=torch.float64)
    if regression:
        y = torch.randn(total, 3, generator=g, dtype=torch.float64)
    else:
        y = torch.randint(0, 4, (total, 3), generator=g)
    owner = np.repeat(np.arange(n_clients), SIZES)
    order = np.random.default_rng(seed).permutation(n_train)
    train = [order[owner == k] for k in range(n_clients)]
    test = [n_train + 3 * k + np.arange(3) for k in range(n_clients)]
    return FederatedData(x=x, y=y, train=ClientSplit.from_lists(train),
                         test=ClientSplit.from_lists(test), val=None,
                         num_classes=1 if regression else 4, input_shape=(6,),
                         task="multitask_regression" if regression else "multitask",
                         task_mask=MASK.clone())


def model(regression: bool = False) -> MTLMLP:
    torch.manual_seed(0)
    return MTLMLP((6,), 1 if regression else 4, num_tasks=3, hidden=(5,))


def train_pair(data, net, ids, tt, seed=3, **client):
    seq, bat = both(net, data, **client)
    w = get_flat(seq.model)
    spec = ClientSpec(task_training=tt)
    return w, seq.train(torch.tensor(ids), w, spec, seed), bat.train(torch.tensor(ids), w, spec, seed)


def assert_same(a, b):
    assert a.deltas.shape == b.deltas.shape
    assert torch.equal(a.task_mask, b.task_mask) and torch.equal(a.shared, b.shared)
    for name in ("deltas", "num_samples", "loss_before", "loss_after", "acc_before"):
        va, vb = getattr(a, name), getattr(b, name)
        assert rel(vb, va) < TOL, (name, rel(vb, va))
    assert float(a.deltas.norm()) > 0


@pytest.mark.parametrize("regression", [False, True])
@pytest.mark.parametrize("tt,client", [
    (TaskTraining(local_steps=3, full_batch=True), {}),                       # FMGDA
    (TaskTraining(local_steps=5, full_batch=False), {"batch_size": 4}),       # FSMGDA, across epochs
    (TaskTraining(local_steps=4, full_batch=False), {"batch_size": 3, "momentum": 0.9}),
])
def test_engines_agree_on_per_task_training(regression, tt, client):
    data = multitask_federation(regression)
    _, a, b = train_pair(data, model(regression), [4, 0, 2, 3], tt, lr=0.1, **client)
    assert a.deltas.shape == (4, 3, sum(p.numel() for p in model(regression).parameters()))
    assert a.task_mask.tolist() == MASK[[4, 0, 2, 3]].tolist()
    assert_same(a, b)


def test_explicit_task_override_agrees():
    data = multitask_federation()
    tasks = torch.tensor([[0, 0, 1], [1, 0, 0]], dtype=torch.bool)
    _, a, b = train_pair(data, model(), [1, 3], TaskTraining(2, False, tasks), lr=0.1, batch_size=4)
    assert a.task_mask.tolist() == tasks.tolist()
    assert_same(a, b)


def test_one_full_batch_step_reports_the_task_gradient_and_zero_elsewhere():
    """K = 1, FMGDA: Delta_is = (w - x_1) / lr = grad f_is(w) on the trunk and head s, 0 on the
    other heads, and all zero for the pairs the client does not hold."""
    data = multitask_federation()
    net = model().double()
    w, a, b = train_pair(data, net, [2, 4], TaskTraining(1, True), lr=0.3)
    owner = param_tasks(net)
    for i, k in enumerate([2, 4]):
        idx = data.train.of(k)
        for s in range(3):
            if not MASK[k, s]:
                assert not a.deltas[i, s].any() and not b.deltas[i, s].any()
                continue
            probe = copy.deepcopy(net)
            set_flat(probe, w)
            loss = sample_losses(probe(data.x[idx]), data.y[idx], "multitask")[:, s].mean()
            grad = torch.cat([p.flatten() for p in torch.autograd.grad(loss, list(probe.parameters()))])
            torch.testing.assert_close(a.deltas[i, s], grad, atol=1e-12, rtol=1e-9)
            assert not a.deltas[i, s][(owner != -1) & (owner != s)].any()
    assert torch.equal(a.shared, owner == -1)


def test_weight_decay_never_moves_other_heads():
    data = multitask_federation()
    _, a, b = train_pair(data, model(), [0], TaskTraining(3, False), lr=0.1, batch_size=4,
                         weight_decay=0.1)
    owner = param_tasks(model())
    for s in range(3):
        assert not a.deltas[0, s][(owner != -1) & (owner != s)].any()
    assert_same(a, b)


def test_single_task_data_is_one_task_held_by_every_client():
    from tests.engine.helpers import federation
    from fedmoo.models.linear import MLP

    data = federation(SIZES, (6,), 3)
    _, a, b = train_pair(data, MLP((6,), 3, hidden=(4,)), [0, 3], TaskTraining(3, False),
                         lr=0.1, batch_size=4)
    assert a.deltas.shape[1] == 1 and a.task_mask.all()
    assert_same(a, b)


def test_post_training_stats_are_refused_with_per_task_training():
    data = multitask_federation()
    seq, bat = both(model(), data)
    w = get_flat(seq.model)
    spec = ClientSpec(task_training=TaskTraining(2, True), eval_trained=True)
    for engine in (seq, bat):
        with pytest.raises(ValueError, match="eval_trained is not available with task_training"):
            engine.train(torch.tensor([0, 1]), w, spec, 0)


class _TwoTaskLine(torch.nn.Module):
    """``out[:, s] = w_s x``: one weight per task (regression)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))

    def forward(self, x):
        return x * self.w


@pytest.mark.parametrize("weighting,expected", [("uniform", (1.0, -1.125)), ("samples", (1.0, -0.5))])
def test_objective_gradient_by_hand(weighting, expected):
    """FMGDA's stationarity measure ||lam^T grad F(x_t)||^2 with F's f_s averaged over the
    clients holding task s. Client 0 (x = 1, 2; y = (1, 0), (0, 2)) holds both tasks, client 1
    (x = 1; y = (5, 3)) only task 1; w = (1, 1), lam = (0.25, 0.75).
    f_00 = mean((1-1)^2, (2-0)^2): grad 4. Task 1: client 0 grad mean(2*1*1, 2*2*0) = 1,
    client 1 grad 2*1*(1-3) = -4: uniform (1 - 4)/2 = -1.5, by samples (2 - 4)/3 = -2/3."""
    from fedmoo.engine.evaluate import objective_gradient

    x = torch.tensor([[1.0], [2.0], [1.0], [0.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0], [0.0, 2.0], [5.0, 3.0], [0.0, 0.0]], dtype=torch.float64)
    data = FederatedData(x=x, y=y, train=ClientSplit.from_lists([np.array([0, 1]), np.array([2])]),
                         test=ClientSplit.from_lists([np.array([3]), np.array([3])]), val=None,
                         num_classes=1, input_shape=(1,), task="multitask_regression",
                         task_mask=torch.tensor([[True, True], [False, True]]))
    net = _TwoTaskLine()
    lam = torch.tensor([0.25, 0.75], dtype=torch.float64)
    grad = objective_gradient(net, data, torch.ones(2, dtype=torch.float64), lam, weighting)
    # lam_0 * 4 = 1; lam_1 * (-1.5) = -1.125 (uniform) or lam_1 * (-2/3) = -0.5 (samples)
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=torch.float64))
    assert net.w.grad is None                      # the model's own gradients are left alone
