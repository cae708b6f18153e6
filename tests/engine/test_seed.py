"""Seeding torch for a round: the same generator state as torch.manual_seed, without its
queued seeds for devices the run does not use."""

from __future__ import annotations

import torch

from fedmoo.engine.common import seed_torch


def test_seed_torch_is_manual_seed_on_the_cpu():
    seed = (1 << 62) + 12345                      # round_seed gives 63-bit seeds
    seed_torch(seed, torch.device("cpu"))
    mine = torch.get_rng_state()
    draws = torch.rand(4)
    torch.manual_seed(seed)
    assert torch.equal(torch.get_rng_state(), mine)
    assert torch.equal(torch.rand(4), draws)
    seed_torch(7, torch.device("cpu"))
    assert not torch.equal(torch.get_rng_state(), mine)
