"""FedFV's conflict projections in coefficient space."""

from __future__ import annotations

import torch

from fedmoo.moo.gram import project_conflicts, remove_conflict


def test_toy_projections_of_the_spec():
    # Prepare: g1=(1,0) (lower loss), g2=(-1,1); both projected, order (1, 2)
    x = torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    # Execute
    c = project_conflicts(x @ x.T, torch.tensor([0, 1]), torch.tensor([True, True]))
    # Assert: g1' = g1 + g2/2 = (0.5, 0.5); g2' = g2 + g1 = (0, 1)
    torch.testing.assert_close(c @ x, torch.tensor([[0.5, 0.5], [0.0, 1.0]], dtype=torch.float64))


def test_kept_clients_and_agreeing_updates_are_untouched():
    x = torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    c = project_conflicts(x @ x.T, torch.tensor([0, 1]), torch.tensor([True, False]))
    torch.testing.assert_close(c @ x, torch.tensor([[0.5, 0.5], [-1.0, 1.0]], dtype=torch.float64))
    y = torch.tensor([[1.0, 0.2], [0.3, 1.0], [0.0, 0.0]], dtype=torch.float64)
    c = project_conflicts(y @ y.T, torch.tensor([2, 0, 1]), torch.ones(3, dtype=torch.bool))
    assert torch.equal(c, torch.eye(3, dtype=torch.float64))


def test_projection_uses_original_vectors_and_current_dot():
    # g3 conflicts with g1 first; after that projection it conflicts with g2 too
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -0.2]], dtype=torch.float64)
    c = project_conflicts(x @ x.T, torch.tensor([0, 1, 2]), torch.tensor([False, False, True]))
    # g3 - (-1) g1 = (0, -0.2); then - (-0.2) g2 = (0, 0)
    torch.testing.assert_close(c[2] @ x, torch.zeros(2, dtype=torch.float64), atol=1e-15, rtol=0)


def test_remove_conflict():
    x, s = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    torch.testing.assert_close(remove_conflict(x, s), torch.tensor([0.5, 0.5]))
    assert torch.equal(remove_conflict(x, torch.tensor([1.0, 1.0])), x)
    assert torch.equal(remove_conflict(x, torch.zeros(2)), x)
