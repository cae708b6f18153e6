"""The round plan (padding, masks, weights) and the stacked parameter layout, by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedmoo.engine.common import client_batches
from fedmoo.engine.layout import ParamLayout
from fedmoo.engine.plan import make_plan
from fedmoo.params import get_flat


def test_plan_pads_short_clients_and_weights_short_batches():
    offsets, sizes = torch.tensor([0, 5, 7]), torch.tensor([5, 2])
    index = torch.arange(100, 107)  # the split's sample indices
    plan = make_plan([0, 1], offsets, sizes, 2, 1, None, torch.Generator().manual_seed(0), index,
                     torch.float64)
    # client 0: batches of 2, 2, 1; client 1: one batch of 2
    assert plan.index.shape == (2, 3, 2) and plan.steps == 3
    assert plan.active.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert plan.full == [True, False, False]
    assert plan.weight[0].tolist() == [[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]
    assert plan.weight[1].tolist() == [[0.5, 0.5], [0.0, 0.0], [0.0, 0.0]]
    assert plan.last.tolist() == [[0.4, 0.4, 0.2], [1.0, 0.0, 0.0]]
    # same batches as the sequential engine draws with the same generator
    g = torch.Generator().manual_seed(0)
    b0 = client_batches(5, 2, 1, None, g)
    b1 = client_batches(2, 2, 1, None, g)
    assert plan.index[0, 0].tolist() == (100 + b0[0][1]).tolist()
    assert plan.index[0, 2, 0].item() == 100 + b0[2][1].item()
    assert plan.index[1, 0].tolist() == (105 + b1[0][1]).tolist()
    assert set(plan.index[1, 1:].flatten().tolist()) == {105}  # padding: the client's first sample


def test_plan_last_epoch_weights_with_local_steps():
    plan = make_plan([0], torch.tensor([0, 3]), torch.tensor([3]), 2, 1, 5,
                     torch.Generator().manual_seed(1), torch.arange(3), torch.float64)
    # epochs: [2, 1], [2, 1], [2] -> 5 steps; the last (partial) epoch is the single batch of 2
    assert plan.active.tolist() == [[1, 1, 1, 1, 1]]
    assert plan.last.tolist() == [[0, 0, 0, 0, 1.0]]


@pytest.mark.parametrize("batch_size, epochs, local_steps", [(3, 2, None), (4, 1, 7), (None, 1, 2)])
def test_plan_is_every_clients_batches_in_cohort_order(batch_size, epochs, local_steps):
    """Property: for unequal clients in any cohort order, each plan row holds exactly the
    batches client_batches draws from the same generator, client after client (indices,
    1/b weights, active steps, last-epoch shares), padded at weight 0 with the client's first
    sample."""
    sizes = torch.tensor([5, 1, 9, 4, 7])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
    index = torch.randperm(int(sizes.sum()), generator=torch.Generator().manual_seed(5)) + 1000
    cohort = [2, 0, 4, 1]
    plan = make_plan(cohort, offsets, sizes, batch_size, epochs, local_steps,
                     torch.Generator().manual_seed(9), index, torch.float64)
    g = torch.Generator().manual_seed(9)
    for i, k in enumerate(cohort):
        start = int(offsets[k])
        batches = client_batches(int(sizes[k]), batch_size, epochs, local_steps, g)
        last_epoch = batches[-1][0]
        in_last = sum(len(p) for e, p in batches if e == last_epoch)
        for s in range(plan.steps):
            if s >= len(batches):
                assert plan.active[i, s] == 0 and plan.last[i, s] == 0
                assert plan.weight[i, s].abs().sum() == 0
                assert set(plan.index[i, s].tolist()) == {int(index[start])}
                continue
            e, p = batches[s]
            b = len(p)
            assert plan.index[i, s, :b].tolist() == index[start + p].tolist()
            assert set(plan.index[i, s, b:].tolist()) <= {int(index[start])}
            assert plan.weight[i, s].tolist() == [1 / b] * b + [0.0] * (plan.index.shape[2] - b)
            assert plan.active[i, s] == 1
            assert plan.last[i, s] == (b / in_last if e == last_epoch else 0.0)
    assert plan.full == [bool(plan.active[:, s].all()) for s in range(plan.steps)]


def test_layout_round_trip_and_transposed_linear_weights():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3))
    layout = ParamLayout(model)
    assert [s.transposed for s in layout.slots] == [False, False, True, False]
    w = get_flat(model)
    rows = torch.stack([w, 2 * w, -w])
    slots = layout.pack(rows, layout.empty(3, w))
    assert [tuple(v.shape) for v in slots] == [(3, 2, 1, 3, 3), (3, 2), (3, 8, 3), (3, 3)]
    assert all(v.is_contiguous() for v in slots)
    assert torch.equal(layout.unpack(slots), rows)
    assert torch.equal(layout.unpack(slots, slice(1, 3)), rows[1:])
    views = layout.params(slots)
    assert torch.equal(views["2.weight"][1], 2 * model[2].weight.detach())
    assert views["2.weight"].shape == (3, 3, 8)
    assert torch.equal(layout.deltas(w, slots), w - rows)
    assert torch.equal(layout.deltas(w, slots, slice(2, 3)), (w - rows)[2:])
    bcast = layout.pack(w, layout.empty(2, w))
    assert torch.equal(layout.unpack(bcast), torch.stack([w, w]))
    layout.pack(-w, bcast, slice(1, 2))          # rows of a slice only
    assert torch.equal(layout.unpack(bcast), torch.stack([w, -w]))
