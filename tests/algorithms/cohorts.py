"""Helpers for server-rule tests: build cohorts from small hand-written tensors."""

from __future__ import annotations

import torch

from fedmoo.state import Cohort


def _vec(values, n, default, dtype=torch.float64):
    if values is None:
        return default(n)
    return torch.as_tensor(values, dtype=dtype)


def ramp(n: int) -> torch.Tensor:
    return torch.linspace(0.5, 2.0, n, dtype=torch.float64)


def make_cohort(deltas, loss_before=None, loss_after=None, acc_before=None, num_samples=None,
                ids=None, local_lr=0.1, personal=None) -> Cohort:
    """A Cohort with every engine-reported field; unspecified per-client values are distinct."""
    d = torch.as_tensor(deltas, dtype=torch.float64)
    if d.dim() == 1:
        d = d[:, None]
    k = d.shape[0]
    return Cohort(
        client_ids=torch.arange(k) if ids is None else torch.as_tensor(ids, dtype=torch.long),
        deltas=d,
        num_samples=_vec(num_samples, k, lambda n: torch.arange(1, n + 1, dtype=torch.float64) * 10),
        loss_before=_vec(loss_before, k, ramp),
        loss_after=_vec(loss_after, k, lambda n: ramp(n) / 2),
        acc_before=_vec(acc_before, k, lambda n: torch.linspace(20.0, 80.0, n, dtype=torch.float64)),
        local_lr=local_lr,
        personal=None if personal is None else torch.as_tensor(personal, dtype=torch.float64),
    )


def one_round(algo, cohort, w0=None, num_clients=None):
    """Initialise ``algo`` (w0 = zeros by default) and apply one server update."""
    dim = cohort.deltas.shape[1]
    w0 = torch.zeros(dim, dtype=torch.float64) if w0 is None else torch.as_tensor(w0, dtype=torch.float64)
    n = num_clients or int(cohort.client_ids.max()) + 1
    state = algo.init(w0, num_clients=n)
    return state, *algo.server_update(state, cohort)
