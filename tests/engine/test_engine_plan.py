"""The round plan (padding, masks, weights) and the stacked parameter layout, by hand."""

from __future__ import annotations

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
