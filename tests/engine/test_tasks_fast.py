"""FMGDA's fast CPU path (fedmoo.engine.cpu_layout): full-batch steps summed over chunks, conv nets in
channels-last, evaluation in small chunks. Same numbers as the plain whole-batch NCHW arithmetic,
in float64 to 1e-10."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from fedmoo.engine.base import LocalSGD
from fedmoo.data.federated import ClientSplit, FederatedData
from fedmoo.engine import cpu_layout
from fedmoo.engine.cpu_layout import (FastConvPoolReLU, RowConv2d, each_row, fast_layout,
                                      row_workers, step_chunk)
from fedmoo.engine.common import sample_losses
from fedmoo.engine.evaluate import evaluate_clients, objective_gradient
from fedmoo.engine.sequential import SequentialEngine
from fedmoo.models.multitask import MTLMLP, MultiLeNet
from fedmoo.params import get_flat, set_flat
from fedmoo.state import ClientSpec, TaskTraining
from tests.engine.helpers import rel

TOL = 1e-10
SIZES = [150, 90, 130]      # with 64-sample chunks: 3, 2 and 3 chunks
MASK = torch.tensor([[1, 1], [1, 0], [0, 1]], dtype=torch.bool)


def images(seed: int = 0) -> FederatedData:
    """Three clients of 16x16 two-task images (the smallest MultiLeNet input), 4 test each."""
    g = torch.Generator().manual_seed(seed)
    n_train = sum(SIZES)
    total = n_train + 4 * len(SIZES)
    x = torch.randn(total, 1, 16, 16, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (total, 2), generator=g)
    owner = np.repeat(np.arange(len(SIZES)), SIZES)
    order = np.random.default_rng(seed).permutation(n_train)
    train = [order[owner == k] for k in range(len(SIZES))]
    test = [n_train + 4 * k + np.arange(4) for k in range(len(SIZES))]
    return FederatedData(x=x, y=y, train=ClientSplit.from_lists(train),
                         test=ClientSplit.from_lists(test), val=None, num_classes=3,
                         input_shape=(1, 16, 16), task="multitask", task_mask=MASK.clone())


def lenet() -> MultiLeNet:
    torch.manual_seed(0)
    return MultiLeNet((1, 16, 16), 3, num_tasks=2).double()


@pytest.fixture
def small_chunks(monkeypatch):
    """64-sample chunks (the minimum) on these 16x16 float64 images."""
    monkeypatch.setattr(cpu_layout, "CPU_STEP_BYTES", 1)
    return 64


def test_step_chunk_counts_input_bytes():
    x = torch.zeros(10, 1, 28, 28)                           # 3,136 bytes a sample
    assert step_chunk(x) == (1 << 20) // 3136 == 334
    assert step_chunk(torch.zeros(10, 3, 224, 224)) == 64  # never fewer than 64
    assert step_chunk(x.double()) == 167


@pytest.mark.parametrize("padding", [0, (2, 1)])
def test_row_conv_equals_the_convolution(padding):
    """A 5x3 one-channel convolution as a 5-channel 1x3 one: same outputs and gradients."""
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(1, 4, (5, 3), padding=padding).double()
    rows = copy.deepcopy(conv)
    assert RowConv2d.applies(rows)
    rows.__class__ = RowConv2d
    x = torch.randn(6, 1, 9, 7, dtype=torch.float64)
    a, b = conv(x), rows(x)
    assert a.shape == b.shape and rel(b.detach(), a.detach()) < 1e-14
    g = torch.randn_like(a)
    ga = torch.autograd.grad(a, list(conv.parameters()), g)
    gb = torch.autograd.grad(b, list(rows.parameters()), g)
    assert all(rel(v, u) < 1e-14 for u, v in zip(ga, gb))


def test_row_conv_applies_to_plain_one_channel_convolutions_only():
    assert not RowConv2d.applies(torch.nn.Conv2d(3, 4, 5))
    assert not RowConv2d.applies(torch.nn.Conv2d(1, 4, 5, stride=2))
    assert not RowConv2d.applies(torch.nn.Conv2d(1, 4, 5, dilation=2))
    assert not RowConv2d.applies(torch.nn.Conv2d(1, 4, 5, padding="same"))
    assert not RowConv2d.applies(torch.nn.Conv2d(1, 4, (1, 5)))
    assert RowConv2d.applies(torch.nn.Conv2d(1, 4, 5, padding=1))


def test_fast_layout_is_a_channels_last_copy_of_conv_nets_only():
    net = lenet()
    fast = fast_layout(net, torch.zeros(2, 1, 16, 16))
    assert fast is not net
    assert type(fast.trunk.conv1) is FastConvPoolReLU and type(fast.trunk.conv2) is FastConvPoolReLU
    assert fast.trunk.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    assert not fast.trunk.conv2.weight.is_contiguous()
    assert [n for n, _ in fast.named_parameters()] == [n for n, _ in net.named_parameters()]
    assert torch.equal(get_flat(fast), get_flat(net))        # flat vectors travel unchanged
    w = torch.arange(get_flat(net).numel(), dtype=torch.float64)
    set_flat(fast, w)
    assert torch.equal(get_flat(fast), w)
    mlp = MTLMLP((6,), 3, num_tasks=2, hidden=(4,))
    assert fast_layout(mlp, torch.zeros(2, 6)) is mlp               # no convolution
    assert fast_layout(net, torch.zeros(2, 1, 16, 16)).trunk is not net.trunk


def plain_fmgda_rows(net, data, ids, w, steps: int, lr: float):
    """The pre-chunking arithmetic, written out: every held (client, task) pair takes ``steps``
    whole-batch gradient steps on its task's mean loss from ``w``, in NCHW."""
    model = copy.deepcopy(net)
    out = {}
    for i, k in enumerate(ids):
        idx = data.train.of(k)
        for s in range(2):
            if not MASK[k, s]:
                continue
            set_flat(model, w)
            for _ in range(steps):
                loss = sample_losses(model(data.x[idx]), data.y[idx], "multitask")[:, s].mean()
                grads = torch.autograd.grad(loss, list(model.parameters()))
                with torch.no_grad():
                    for p, g in zip(model.parameters(), grads):
                        p -= lr * g
            out[i, s] = ((w - get_flat(model)) / lr, float(loss.detach()))
    return out


def test_chunked_channels_last_full_batch_steps_equal_whole_batch_steps(small_chunks):
    """FMGDA rows on the fast path (chunks of 64 samples: 150 = 64 + 64 + 22; channels-last
    copy) equal plain whole-batch NCHW gradient descent; heads a row does not train stay 0."""
    data, net = images(), lenet()
    engine = SequentialEngine(copy.deepcopy(net), data, LocalSGD(lr=0.2, batch_size=None))
    w = get_flat(net)
    ids = [0, 1, 2]
    cohort = engine.train(torch.tensor(ids), w, ClientSpec(task_training=TaskTraining(3, True)), 7)
    assert engine._task_model.trunk.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    want = plain_fmgda_rows(net, data, ids, w, steps=3, lr=0.2)
    assert sorted(want) == [(0, 0), (0, 1), (1, 0), (2, 1)]
    for (i, s), (delta, last_loss) in want.items():
        assert rel(cohort.deltas[i, s], delta) < TOL
    assert not cohort.deltas[1, 1].any() and not cohort.deltas[2, 0].any()
    # loss_after: the last step's loss, averaged over the tasks the client holds
    after0 = (want[0, 0][1] + want[0, 1][1]) / 2
    assert abs(float(cohort.loss_after[0]) - after0) < TOL * after0
    assert abs(float(cohort.loss_after[1]) - want[1, 0][1]) < TOL * want[1, 0][1]
    # loss_before: w's mean loss over the client's samples and the tasks it holds
    idx = data.train.of(0)
    with torch.no_grad():
        before = float(sample_losses(net(data.x[idx]), data.y[idx], "multitask").mean())
    assert abs(float(cohort.loss_before[0]) - before) < TOL * before


def test_chunks_do_not_change_fsmgda_minibatches(small_chunks):
    """Minibatches under the chunk size take the unchunked step: FSMGDA on the channels-last
    copy matches the same engine on the NCHW model to float rounding."""
    data, net = images(), lenet()
    spec = ClientSpec(task_training=TaskTraining(4, False))
    fast = SequentialEngine(copy.deepcopy(net), data, LocalSGD(lr=0.1, batch_size=32))
    plain = SequentialEngine(copy.deepcopy(net), data, LocalSGD(lr=0.1, batch_size=32))
    plain._task_model = plain.model                            # NCHW, as before
    a = fast.train(torch.tensor([2, 0]), get_flat(net), spec, 3)
    b = plain.train(torch.tensor([2, 0]), get_flat(net), spec, 3)
    assert rel(a.deltas, b.deltas) < TOL and rel(a.loss_after, b.loss_after) < TOL


def test_objective_gradient_in_chunks_equals_one_pass(small_chunks, monkeypatch):
    data, net = images(), lenet()
    lam = torch.tensor([0.3, 0.7], dtype=torch.float64)
    w = get_flat(net)
    chunked = objective_gradient(fast_layout(net, data.x), data, w, lam)
    monkeypatch.setattr(cpu_layout, "CPU_STEP_BYTES", 1 << 40)     # one chunk of everything
    whole = objective_gradient(net, data, w, lam)
    assert rel(chunked, whole) < TOL


def test_evaluation_in_small_chunks_on_the_fast_layout():
    data, net = images(), lenet()
    w = get_flat(net)
    a = evaluate_clients(fast_layout(net, data.x), data, "train", w, chunk=64)
    b = evaluate_clients(net, data, "train", w)
    np.testing.assert_allclose(a.loss, b.loss, rtol=TOL)
    np.testing.assert_array_equal(a.correct, b.correct)
    np.testing.assert_array_equal(a.count, SIZES)


@pytest.mark.parametrize("full_batch", [True, False])
def test_rows_side_by_side_give_the_same_numbers(small_chunks, full_batch):
    """Two intra-op threads: the rows train on two threads at once (a model copy each), with
    exactly the numbers of one thread; torch's thread count is restored."""
    data, net = images(), lenet()
    spec = ClientSpec(task_training=TaskTraining(3, full_batch))
    ids, w = torch.tensor([2, 0, 1]), get_flat(net)
    one = SequentialEngine(copy.deepcopy(net), data, LocalSGD(lr=0.2, batch_size=32))
    two = SequentialEngine(copy.deepcopy(net), data, LocalSGD(lr=0.2, batch_size=32))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = one.train(ids, w, spec, 5)
        torch.set_num_threads(2)
        b = two.train(ids, w, spec, 5)
        assert torch.get_num_threads() == 2 and len(two._task_models) == 1
        assert row_workers(net, data.x, 4) == 2 and row_workers(net, data.x, 1) == 1
        assert row_workers(torch.nn.Linear(1000, 100), data.x, 4) == 1     # 100,100 parameters
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(a.deltas, b.deltas) and torch.equal(a.loss_after, b.loss_after)
    assert torch.equal(a.loss_before, b.loss_before)


def test_each_row_hands_every_row_to_one_worker():
    seen = []
    each_row(7, 3, lambda k, r: seen.append((r, k)))
    assert sorted(r for r, _ in seen) == list(range(7)) and {k for _, k in seen} <= {0, 1, 2}
    with pytest.raises(ZeroDivisionError):
        each_row(3, 2, lambda k, r: 1 / (r - 2))


def test_evaluation_side_by_side_gives_the_same_numbers(small_chunks):
    """Two intra-op threads: the stationarity gradient and the per-client evaluation run their
    chunks on two threads at once, with exactly the numbers of one thread."""
    data, net = images(), lenet()
    lam = torch.tensor([0.3, 0.7], dtype=torch.float64)
    w = get_flat(net) * 1.1
    fast = fast_layout(net, data.x)
    threads, out = torch.get_num_threads(), []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            ev = evaluate_clients(fast, data, "train", w, chunk=64)
            out.append((objective_gradient(fast, data, w, lam), ev.loss, ev.correct))
            assert torch.get_num_threads() == n and torch.equal(get_flat(fast), w)
    finally:
        torch.set_num_threads(threads)
    (g1, l1, c1), (g2, l2, c2) = out
    assert torch.equal(g1, g2) and np.array_equal(l1, l2) and np.array_equal(c1, c2)
    assert rel(g1, objective_gradient(net, data, w, lam)) < TOL     # NCHW, one thread
