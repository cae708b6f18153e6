"""FMGDA's per-task averaging over the indicator matrix and the S-task min-norm QP, by hand."""

from __future__ import annotations

import torch

from fedmoo.moo.minnorm import min_norm_tasks, task_average

T = dict(dtype=torch.float64)


def test_task_average_uses_only_the_clients_holding_each_task():
    # Prepare: 3 clients, 3 tasks; task 2 is held by nobody; masked-out entries hold garbage
    deltas = torch.full((3, 3, 2), 99.0, **T)
    deltas[0, 0] = torch.tensor([2.0, 0.0])
    deltas[1, 0] = torch.tensor([4.0, 2.0])
    deltas[1, 1] = torch.tensor([0.0, 1.0])
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    # Execute
    means, present = task_average(deltas, mask)
    # Assert: task 0 = mean of clients 0 and 1, task 1 = client 1 alone, task 2 = zero, absent
    torch.testing.assert_close(means, torch.tensor([[3.0, 1.0], [0.0, 1.0], [0.0, 0.0]], **T))
    assert present.tolist() == [True, True, False]


def test_task_average_with_sample_weights():
    deltas = torch.tensor([[[1.0]], [[4.0]]], **T)
    means, _ = task_average(deltas, torch.ones(2, 1, dtype=torch.bool), torch.tensor([1.0, 3.0], **T))
    torch.testing.assert_close(means, torch.tensor([[(1 * 1 + 3 * 4) / 4.0]], **T))


def test_min_norm_on_hand_computed_task_gradients():
    # ||l1 (2,0) + l2 (0,1)||^2 = 4 l1^2 + l2^2 on the simplex -> l = (1/5, 4/5), d = (0.4, 0.8)
    means = torch.tensor([[2.0, 0.0], [0.0, 1.0]], **T)
    lam, sol = min_norm_tasks(means, torch.tensor([True, True]))
    torch.testing.assert_close(lam, torch.tensor([0.2, 0.8], **T), atol=1e-9, rtol=0)
    d = lam @ means
    # common descent: <Delta_s, d> = ||d||^2 for both (interior solution)
    torch.testing.assert_close(means @ d, torch.full((2,), float(d @ d), **T), atol=1e-9, rtol=0)
    assert sol.method == "qp"


def test_min_norm_picks_the_shorter_vector_when_it_is_a_descent_direction_for_all():
    # (1,1) and (3,3): the min-norm point of the segment is (1,1) itself -> l = (1, 0)
    lam, _ = min_norm_tasks(torch.tensor([[1.0, 1.0], [3.0, 3.0]], **T), torch.tensor([True, True]))
    torch.testing.assert_close(lam, torch.tensor([1.0, 0.0], **T), atol=1e-9, rtol=0)


def test_min_norm_skips_absent_tasks_and_restricts_to_coordinates():
    # tasks 0 and 2 present; coordinates 0-1 are the trunk, 2 is task 0's head (large)
    means = torch.tensor([[1.0, 0.0, 5.0], [7.0, 7.0, 7.0], [0.0, 1.0, 0.0]], **T)
    present = torch.tensor([True, False, True])
    trunk = torch.tensor([True, True, False])
    lam, _ = min_norm_tasks(means, present, trunk)
    torch.testing.assert_close(lam, torch.tensor([0.5, 0.0, 0.5], **T), atol=1e-9, rtol=0)
    # all coordinates: G = [[26, 0], [0, 1]] -> l = (1/27, 26/27)
    lam, _ = min_norm_tasks(means, present)
    torch.testing.assert_close(lam, torch.tensor([1 / 27, 0.0, 26 / 27], **T), atol=1e-9, rtol=0)


def test_no_present_task_gives_zero_weights():
    lam, sol = min_norm_tasks(torch.ones(2, 3, **T), torch.tensor([False, False]))
    assert lam.tolist() == [0.0, 0.0] and sol is None
