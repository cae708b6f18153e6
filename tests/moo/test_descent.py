"""Cosines between the updates and the server direction (server/min_cos, server/harmed)."""

from __future__ import annotations

import math

import torch

from fedmoo.moo.descent import HARM_TOL, common_descent, descent_cosines, move_norm
from fedmoo.moo.gram import combine, sq_norms


def test_cosines_by_hand():
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    cos = descent_cosines(x, torch.tensor([1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(cos, torch.tensor([1.0, -1.0, 0.6, 0.0], dtype=torch.float64))
    assert common_descent(x, torch.tensor([1.0, 0.0])) == (-1.0, 1)


def test_cosines_in_blocks_of_rows(monkeypatch):
    """Rows go to float64 a block at a time; the blocks (here one or two rows) change nothing,
    and rows that ``only`` leaves out stay 0."""
    from fedmoo.moo import descent

    x = torch.tensor([[[3.0, 4.0], [1.0, 0.0]], [[0.0, -2.0], [-1.0, 1.0]]])   # [K=2, S=2, 2]
    d = torch.tensor([0.0, 1.0])
    only = torch.tensor([True, False, True, True])
    want = torch.tensor([0.8, 0.0, -1.0, 1 / math.sqrt(2)], dtype=torch.float64)
    for elements in (2, 4, descent.BLOCK_ELEMENTS):
        monkeypatch.setattr(descent, "BLOCK_ELEMENTS", elements)
        torch.testing.assert_close(descent_cosines(x, d, only), want)


def test_zero_direction_harms_nobody():
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert common_descent(x, torch.zeros(2)) == (0.0, 0)


def test_rounding_on_an_orthogonal_direction_is_not_harm():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    d = torch.tensor([-1e-12, 1.0], dtype=torch.float64)     # cos with client 0 = -1e-12
    min_cos, harmed = common_descent(x, d)
    assert -HARM_TOL < min_cos < 0 and harmed == 0


def test_per_task_rows_count_clients_once():
    # client 0 holds both tasks, client 1 only task 0 (its task-1 row is zero and not held)
    x = torch.tensor([[[1.0, 0.0], [0.0, -1.0]], [[-1.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    d = torch.tensor([1.0, 1.0], dtype=torch.float64)
    cos = descent_cosines(x, d)
    s = 1 / math.sqrt(2)
    torch.testing.assert_close(cos, torch.tensor([s, -s, -s, 0.0], dtype=torch.float64))
    assert common_descent(x, d, mask) == (-s, 2)                      # both clients harmed
    assert common_descent(x, torch.tensor([1.0, -1.0]), mask) == (-s, 1)  # only client 1


def test_float32_updates_past_1e19_keep_exact_cosines_and_norms():
    x = torch.tensor([[3e20, 4e20], [-1e20, 0.0]], dtype=torch.float32)
    cos = descent_cosines(x, torch.tensor([1e20, 0.0], dtype=torch.float32))
    torch.testing.assert_close(cos, torch.tensor([0.6, -1.0], dtype=torch.float64))
    torch.testing.assert_close(sq_norms(x), torch.tensor([25e40, 1e40], dtype=torch.float64),
                               rtol=1e-6, atol=0)


def test_combine_keeps_coefficients_below_float32_range():
    x = torch.tensor([[1e20, 0.0], [0.0, 1e20]], dtype=torch.float32)
    coef = torch.tensor([2e-42, 1e-45], dtype=torch.float64)          # subnormal / zero in float32
    out = combine(coef, x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([2e-22, 1e-25]), rtol=1e-6, atol=0)
    # in range: the plain float32 product, bit for bit
    c = torch.tensor([0.25, 0.5], dtype=torch.float64)
    assert torch.equal(combine(c, x), c.float() @ x)


def test_a_rounding_level_move_is_a_zero_move_that_harms_nobody():
    # Two opposite updates: the min-norm point is 0; a solver leaves ~1e-12 of one of them.
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    d = torch.tensor([-1e-12, 0.0], dtype=torch.float64)        # cos = +1 / -1 in exact math
    assert move_norm(x, d) == 0.0 and common_descent(x, d) == (0.0, 0)
    # float32 updates round at ~1e-7: a 1e-6 move is still noise there, not in float64
    d6 = torch.tensor([-1e-6, 0.0])
    assert common_descent(x.float(), d6) == (0.0, 0)
    assert common_descent(x, d6.double()) == (-1.0, 1)


def test_harm_tolerance_grows_as_the_move_nears_the_noise_level():
    # noise = 1e-8 * ||x||max = 1e-8; d = 1e-6 long -> cosines above -0.01 are not harm
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    d = torch.tensor([-0.005e-6, 1e-6], dtype=torch.float64)    # cos with client 0 ~ -0.005
    min_cos, harmed = common_descent(x, d)
    assert min_cos < -HARM_TOL and harmed == 0
    d = torch.tensor([-0.05e-6, 1e-6], dtype=torch.float64)     # cos ~ -0.05 < -0.01: harm
    assert common_descent(x, d)[1] == 1


def test_fedmgda_plus_on_a_pareto_stationary_cohort_reports_a_zero_move():
    from fedmoo.algorithms import get
    from fedmoo.state import Cohort

    algo = get("fedmgda_plus")(epsilon=1.0)
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=2)
    g = torch.tensor([[0.3, 0.1], [-0.7, -0.7 / 3]], dtype=torch.float64)   # 0 is in their hull
    cohort = Cohort(client_ids=torch.tensor([0, 1]), deltas=g, num_samples=torch.tensor([5, 5]),
                    loss_before=None, loss_after=torch.ones(2), acc_before=None, local_lr=0.1)
    _, diag = algo.server_update(state, cohort)
    assert diag["server/d_norm"] == 0.0
    assert diag["server/harmed"] == 0.0 and diag["server/min_cos"] == 0.0
