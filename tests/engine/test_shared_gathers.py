"""A lockstep group's shared gathers (fedmoo.engine.common.sharing_gathers): one copy of the
same rows of the same tensor, never a stale one."""

from __future__ import annotations

import weakref

import torch

from fedmoo.engine import common


def test_a_gather_is_shared_only_while_source_rows_and_copy_are_the_same(monkeypatch):
    monkeypatch.setattr(common, "SHARE_BYTES", 0)
    x = torch.arange(12.0).reshape(6, 2)
    idx = torch.tensor([[4, 1], [0, 5]])
    with common.sharing_gathers():
        a = common.gather(x, idx)
        assert common.gather(x, idx.clone()) is a                  # the same rows: one copy
        assert torch.equal(a, x[idx])
        other = common.gather(x, torch.tensor([[5, 0], [1, 4]]))   # same sum, other rows
        assert other is not a and torch.equal(other, x[torch.tensor([[5, 0], [1, 4]])])
        a.add_(100.0)                                              # the copy was modified
        b = common.gather(x, idx)
        assert b is not a and torch.equal(b, x[idx])
        x.mul_(2.0)                                                # the source was modified
        assert torch.equal(common.gather(x, idx), x[idx])
        # an entry left by a freed tensor whose id the source now has is not served
        gathers = common._gathers
        key = (id(x), x._version, x.device, tuple(idx.shape), int(idx.sum()))
        ghost = torch.zeros(2, 2, 2)
        gathers.entries[key] = (weakref.ref(torch.ones(1)), idx.clone(), ghost, ghost._version)
        assert torch.equal(common.gather(x, idx), x[idx])
    assert common._gathers is None
    assert common.gather(x, idx) is not common.gather(x, idx)     # outside: a copy each time
