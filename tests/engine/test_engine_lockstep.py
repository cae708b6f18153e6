"""The lockstep program (fedmoo.engine.lockstep): the fused linear layer's update by hand, graph
patterns the node-by-node interpreter must get right, and the SGD rule's fused paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedmoo.engine import build
from fedmoo.engine.base import LocalSGD
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.layout import ParamLayout
from fedmoo.engine.lockstep import LockstepProgram
from fedmoo.engine.rowsgd import RowSGD, add_product, add_tensor
from fedmoo.errors import UserError
from fedmoo.params import get_flat
from fedmoo.state import ClientSpec
from tests.engine.helpers import both, federation, rel
from tests.engine.test_engine_equivalence import SIZES, assert_same_cohort, run_pair


def test_fused_linear_step_is_sgd_by_hand():
    """One step of a 2 -> 1 linear layer on two rows, backward from sum(out) (so d = 1):
    weight_r -= lr x_r, bias_r -= lr."""
    model = nn.Sequential(nn.Linear(2, 1)).double()
    layout = ParamLayout(model)
    prog = LockstepProgram(model, layout, torch.fx.symbolic_trace(model).graph)
    assert prog.fused == {"0": (0, 1)}
    w = torch.tensor([0.5, -1.0, 0.25], dtype=torch.float64)          # weight (1x2), bias
    slots = layout.pack(torch.stack([w, 2 * w]), layout.empty(2, w))
    anchor = layout.pack(w, layout.empty(1, w))
    x = torch.tensor([[[1.0, 2.0]], [[3.0, -1.0]]], dtype=torch.float64)   # [R=2, B=1, 2]
    rule = RowSGD(slots, None, anchor, 0.1, None, None, 0.0)
    out, leaves = prog.forward(slots, x, rule, torch.zeros((), requires_grad=True))
    assert leaves == {}
    # out_r = x_r . w_r + b_r: row 0: 0.5 - 2 + 0.25 = -1.25; row 1: 2*(1.5 + 1) + 0.5 = 5.5
    assert out.flatten().tolist() == [-1.25, 5.5]
    out.sum().backward()           # d = 1 per row: weight -= 0.1 x, bias -= 0.1
    got = layout.unpack(slots)
    want = torch.tensor([[0.5 - 0.1, -1.0 - 0.2, 0.25 - 0.1],
                         [1.0 - 0.3, -2.0 + 0.1, 0.5 - 0.1]], dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-15)


@pytest.mark.parametrize("momentum, mu, wd", [(None, None, 0.0), (None, 0.3, 0.0),
                                              (None, None, 0.05), (0.9, 0.3, 0.05)])
def test_fused_product_equals_materialised_gradient(momentum, mu, wd):
    """RowSGD with add_product(h, d) gives the same step as with the gradient h^T d as a tensor,
    for plain SGD, proximal, weight decay and momentum (per-row learning rates)."""
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    h = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    d = torch.randn(3, 6, 5, generator=g, dtype=torch.float64)
    anchor = [torch.randn(1, 4, 5, generator=g, dtype=torch.float64)]
    lr = torch.tensor([0.1, 0.0, 0.2], dtype=torch.float64)
    buf0 = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    outs = []
    for add in (add_product(h, d), add_tensor(h.transpose(1, 2) @ d)):
        p, bufs = [p0.clone()], None if momentum is None else [buf0.clone()]
        RowSGD(p, bufs, anchor, lr, mu, momentum, wd).apply(0, add)
        outs.append(p[0])
    assert rel(outs[0], outs[1]) < 1e-14
    assert torch.equal(outs[0][1], p0[1])      # learning rate 0: the row does not move
    if momentum is None and mu is None and not wd:
        assert torch.allclose(outs[0], p0 - lr.view(-1, 1, 1) * (h.transpose(1, 2) @ d))


class SharedLinear(nn.Module):
    """The same Linear twice (tied weights): it must not be fused."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.a(torch.relu(self.a(x.flatten(1))))))


class RawParams(nn.Module):
    """A parameter used directly (get_attr), a shape query, a view, a residual sum and a cat."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4) * 0.3)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.sigmoid(x.view(x.size(0), -1) @ self.w)
        h = h + 0.5 * h.flip(-1)
        return self.fc(torch.cat([h, h * h], dim=1))


class Mixed(nn.Module):
    """A grouped Conv1d, GroupNorm, pooling, a same-rank sum, a reduction and an index."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, padding=1, groups=2)
        self.norm = nn.GroupNorm(2, 4)
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = self.pool(torch.relu(self.norm(self.conv(x))))           # [B, 4, 1]
        h = h + h.mean(-1, keepdim=True)
        return self.fc(h[:, :, -1] * 2.0)


@pytest.mark.parametrize("make, fused, kinds", [
    (SharedLinear, {"out"}, {"direct", "flatten", "vmap"}),
    (RawParams, {"fc"}, {"direct", "shape", "vmap"}),
    (Mixed, {"fc"}, {"conv", "group_norm", "per_sample", "direct", "index", "vmap"}),
])
def test_graph_patterns_agree_with_the_reference(make, fused, kinds):
    torch.manual_seed(0)
    data = federation(SIZES, (2, 3), 3)
    _, bat = both(make(), data)
    assert bat.program is not None and set(bat.program.fused) == fused
    assert kinds <= set(bat.program.kinds.values())
    a, b = run_pair(make(), data, [4, 0, 2, 1], lr=0.2, batch_size=4, momentum=0.5)
    assert_same_cohort(a, b)


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        if x.sum() > 0:                  # data-dependent control flow: fx cannot trace it
            return self.fc(x)
        return self.fc(-x)


def test_untraceable_model_falls_back_to_vmap_or_is_refused_when_lockstep_is_asked():
    data, sgd = federation([4, 4], (6,), 3), LocalSGD(lr=0.1, batch_size=2)
    assert BatchedEngine(Untraceable().double(), data, sgd).program is None
    with pytest.raises(UserError, match="engine.program=lockstep: torch.fx cannot trace"):
        BatchedEngine(Untraceable().double(), data, sgd, program="lockstep")
    with pytest.raises(UserError, match="engine.program='fast' must be one of"):
        build({"name": "batched", "program": "fast"}, Untraceable().double(), data, sgd)


def test_programs_agree_with_each_other_on_the_paper_cnn_with_dropout_off():
    from fedmoo import models

    torch.manual_seed(1)
    model = models.build({"name": "cnn_fmnist"}, (1, 28, 28), 10).double()
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.p = 0.0
    data = federation([3, 4, 2], (1, 28, 28), 10)
    w = get_flat(model).double()
    outs = [BatchedEngine(model, data, LocalSGD(lr=0.05, batch_size=2), program=p)
            .train(torch.tensor([1, 0, 2]), w, ClientSpec(), seed=3) for p in ("lockstep", "vmap")]
    assert rel(outs[0].deltas, outs[1].deltas) < 1e-10


class Unused(nn.Module):
    """A parameter the loss never reaches: torch.optim.SGD leaves it alone, weight decay too."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)
        self.spare = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_a_parameter_without_gradient_takes_no_step_as_in_torch_optim():
    torch.manual_seed(0)
    data = federation(SIZES, (2, 3), 3)
    a, b = run_pair(Unused(), data, [0, 1, 2], lr=0.2, batch_size=4, momentum=0.5,
                    weight_decay=0.1, program="lockstep")
    assert_same_cohort(a, b)
    assert torch.count_nonzero(b.deltas[:, :4]) == 0        # spare is the first parameter
