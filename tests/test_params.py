from __future__ import annotations

import torch
from torch import nn

from fedmoo.params import get_flat, num_params, set_flat


def test_flat_roundtrip_in_parameter_order():
    m = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    flat = get_flat(m)
    assert flat.shape == (num_params(m),) == (3 * 2 + 2 + 2 + 1,)
    assert torch.equal(flat[:6], m[0].weight.detach().reshape(-1))
    new = torch.arange(flat.numel(), dtype=flat.dtype)
    set_flat(m, new)
    assert torch.equal(get_flat(m), new)
    assert m[2].bias.item() == new[-1].item()
