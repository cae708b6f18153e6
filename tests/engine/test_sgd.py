"""fedmoo's SGD is torch.optim.SGD's arithmetic, bit for bit (and imports no torch._dynamo)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from fedmoo.engine.sequential import SGD
from tests.conftest import ROOT


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.0), (0.5, 1e-3)])
def test_same_bits_as_torch_optim(momentum, wd):
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    unused = torch.nn.Parameter(torch.ones(2))        # no gradient: no step in either
    b = torch.nn.Sequential(*[type(m)(*([] if isinstance(m, torch.nn.Tanh) else
                                        [m.in_features, m.out_features])) for m in a])
    b.load_state_dict(a.state_dict())
    ours = SGD([*a.parameters(), unused], lr=0.1, momentum=momentum, weight_decay=wd)
    ref = torch.optim.SGD(b.parameters(), lr=0.1, momentum=momentum, weight_decay=wd)
    for step in range(4):
        x = torch.randn(8, 5)
        for model, opt in ((a, ours), (b, ref)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert torch.equal(unused, torch.ones(2))


def test_hand_computed_momentum_step():
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = SGD([p], lr=0.5, momentum=0.5)
    for _ in range(2):
        opt.zero_grad()
        (2 * p).sum().backward()       # gradient 2
        opt.step()
    # step 1: b = 2, p = 1 - 1 = 0; step 2: b = 0.5 * 2 + 2 = 3, p = 0 - 1.5
    assert p.item() == -1.5


def test_no_dynamo_import():
    code = ("import sys, torch; from fedmoo.engine.sequential import SGD; p = torch.nn.Parameter("
            "torch.ones(2)); o = SGD([p], 0.1); p.sum().backward(); o.step(); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT)}, check=True).stdout.strip()
    assert out == "False"
