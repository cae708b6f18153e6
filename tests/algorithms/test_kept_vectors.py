"""``Algorithm.kept_vectors`` is what each rule's state keeps: the model-sized tensors of its
initial state besides w, per client and in total (the run's memory estimate counts them:
tests/run/test_config_checks.py)."""

from __future__ import annotations

import pytest
import torch

from fedmoo import algorithms

D, N = 50, 7
CASES = [(name, {}) for name in algorithms.names()] + [("fedfv", {"tau": 0})]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}{kw or ''}" for n, kw in CASES])
def test_a_rule_keeps_the_model_sized_vectors_it_declares(name, kwargs):
    algo = algorithms.build({"name": name, **kwargs})
    state = algo.init(torch.zeros(D), num_clients=N)
    kept = sum(v.numel() for k, v in vars(state).items()
               if k != "w" and isinstance(v, torch.Tensor) and v.numel() >= D)
    per_client, total = algo.kept_vectors
    assert kept == D * (per_client * N + total)
