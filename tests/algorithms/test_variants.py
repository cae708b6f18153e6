"""The reference-code variants of the rules (q-FedAvg's and AdaFed's post-training loss, FedFA as
easyFL v1.0 ran it), TERM's negative tilt, float32 overflow, and the common-descent diagnostic."""

from __future__ import annotations

import math

import pytest
import torch

from fedmoo.algorithms import build, get, names
from fedmoo.state import Cohort
from tests.algorithms.cohorts import make_cohort, one_round


def with_trained(cohort: Cohort, loss=None, acc=None) -> Cohort:
    """The cohort with the engine's post-training measurements (ClientSpec.eval_trained)."""
    f64 = lambda v: None if v is None else torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return cohort.replace(loss_trained=f64(loss), acc_trained=f64(acc))


# -- q-FedAvg: where the loss is measured ---------------------------------------------------------
def test_qfedavg_loss_at_after_uses_the_post_training_loss():
    # Prepare: the toy of test_toy_numbers (w_t=0, L=10, g=(0.2, -0.1)) with the losses swapped
    # after training: before (1, 4), after (4, 1)
    cohort = with_trained(make_cohort([[0.2], [-0.1]], loss_before=[1.0, 4.0], local_lr=0.1),
                          loss=[4.0, 1.0])
    before, after = get("qfedavg")(q=1.0), get("qfedavg")(q=1.0, loss_at="after")
    # Execute
    _, s_before, _ = one_round(before, cohort)
    _, s_after, diag = one_round(after, cohort)
    # Assert: F=(4,1): Delta = F L g = (8, -1), h = L^2 g^2 + L F = (4 + 40, 1 + 10) = 55,
    # w = -(8 - 1)/55 = -7/55 (before: +2/55)
    assert diag["server/h_sum"] == pytest.approx(55.0)
    assert float(s_after.w[0]) == pytest.approx(-7 / 55, abs=1e-9)
    assert float(s_before.w[0]) == pytest.approx(2 / 55, abs=1e-9)
    # the spec asks the engine for the measurement only when it is used
    ids = torch.arange(2)
    assert after.client_spec(None, ids).eval_trained and not before.client_spec(None, ids).eval_trained
    with pytest.raises(ValueError, match="needs cohort.loss_trained"):
        one_round(after, make_cohort([[0.2], [-0.1]]))


# -- FedFA: the easyFL v1.0 release -----------------------------------------------------------
def test_fedfa_uniform_aggregate_ignores_the_weights_and_keeps_the_momentum():
    # Prepare: g = e_1, e_2; lr 0.1; accuracy of w_t (50, 50), of the trained models (90, 10)
    cohort = with_trained(make_cohort(torch.eye(2), acc_before=[50.0, 50.0], local_lr=0.1),
                          acc=[90.0, 10.0])
    easyfl = get("fedfa")(beta=0.5, gamma=0.5, aggregate="uniform", acc_at="after")
    # Execute
    _, s1, diag = one_round(easyfl, cohort)
    s2, _ = easyfl.server_update(s1, cohort)
    # Assert: w_avg - w_t = -(0.5, 0.5); m1 = 0.5 * (w_avg - w_t) = -(0.25, 0.25);
    # w_1 = w_avg - 0.1 m1 = -(0.475, 0.475); round 2: m2 = 0.5 m1 - 0.25 = -(0.375, 0.375),
    # w_2 = w_1 - 0.5 - 0.1 m2 = -(0.9375, 0.9375)
    torch.testing.assert_close(s1.w, torch.full((2,), -0.475, dtype=torch.float64))
    torch.testing.assert_close(s2.w, torch.full((2,), -0.9375, dtype=torch.float64))
    # p is still computed, from the post-training accuracy: A = -log2(acc/sum + 1e-6), equal
    # frequencies give Q shares 1/2 each
    a = [-math.log2(0.9 + 1e-6), -math.log2(0.1 + 1e-6)]
    assert diag["server/p_max"] == pytest.approx(0.5 * a[1] / sum(a) + 0.25, abs=1e-12)
    assert easyfl.client_spec(None, torch.arange(2)).eval_trained


def test_fedfa_weighted_after_uses_the_trained_accuracy():
    cohort = with_trained(make_cohort(torch.eye(2), acc_before=[50.0, 50.0], local_lr=0.1),
                          acc=[90.0, 10.0])
    _, state, _ = one_round(get("fedfa")(gamma=0.5, acc_at="after"), cohort)
    a = torch.tensor([-math.log2(0.9 + 1e-6), -math.log2(0.1 + 1e-6)], dtype=torch.float64)
    p = 0.5 * a / a.sum() + 0.25
    # w_avg - w_t = -p; m = -0.5 p; w = -p + 0.05 p = -0.95 p
    torch.testing.assert_close(state.w, -0.95 * p)
    _, uniform_acc, _ = one_round(get("fedfa")(gamma=0.5), cohort)     # acc_before: equal shares
    torch.testing.assert_close(uniform_acc.w, torch.full((2,), -0.475, dtype=torch.float64))


# -- AdaFed: the loss of the trained model ----------------------------------------------------
def test_adafed_trained_loss_option_reads_loss_trained():
    s = 1 / math.sqrt(2)
    cohort = with_trained(make_cohort([[1.0, 0.0], [s, s]], loss_after=[5.0, 5.0]),
                          loss=[1.0, 2.0])
    algo = get("adafed")(gamma=1.0, loss="trained")
    _, state, _ = one_round(algo, cohort)
    # the toy of test_toy_numbers, whose f = (1, 2) is now the trained models' loss
    torch.testing.assert_close(-state.w, torch.tensor([0.230248, 0.420991], dtype=torch.float64),
                               atol=1e-6, rtol=0)
    assert algo.client_spec(None, torch.arange(2)).eval_trained
    assert not get("adafed")().client_spec(None, torch.arange(2)).eval_trained


# -- TERM: negative tilts stay finite ---------------------------------------------------------
@pytest.mark.parametrize("normalization", ["reference", "softmax"])
def test_term_negative_tilt_by_hand(normalization):
    # Prepare: t = -100, F = (0.1, 20): exp(-100 (0.1 - 20)) = exp(1990) overflows with max F
    cohort = make_cohort(torch.eye(2), loss_before=[0.1, 20.0])
    # Execute
    _, state, diag = one_round(get("term")(t=-100.0, normalization=normalization), cohort)
    # Assert: shifted by min F, e = (1, exp(-1990) = 0). reference: est = 0.5 * mean(e) = 0.25,
    # omega = e / (est K) = (2, 0), w = -(1/K) omega = (-1, 0); softmax: omega = (1, 0)
    assert torch.isfinite(state.w).all()
    torch.testing.assert_close(state.w, torch.tensor([-1.0, 0.0], dtype=torch.float64))
    assert diag["server/omega_max"] == (2.0 if normalization == "reference" else 1.0)


@pytest.mark.parametrize("t", [-1e308, -1e6, -100.0, -1.0, 0.0, 1.0, 100.0, 1e6, 1e308])
@pytest.mark.parametrize("losses", [[0.1, 20.0], [0.0, 1e300], [-1e300, 1e300], [3.0, 3.0]])
def test_term_weights_are_finite_for_every_finite_input(t, losses):
    cohort = make_cohort(torch.eye(2), loss_before=losses)
    for normalization in ("reference", "softmax"):
        algo = get("term")(t=t, normalization=normalization)
        _, s1, diag = one_round(algo, cohort)
        s2, _ = algo.server_update(s1, cohort)
        assert torch.isfinite(s2.w).all() and math.isfinite(diag["server/omega_max"])


def test_term_positive_tilt_keeps_the_reference_numbers():
    f = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    _, state, _ = one_round(get("term")(t=1.0), make_cohort(torch.eye(3), loss_before=f))
    e = torch.exp(f - 3.0)
    torch.testing.assert_close(-state.w, e / (0.5 * e.mean() * 3) / 3)
    _, soft, _ = one_round(get("term")(t=0.5, normalization="softmax"),
                           make_cohort(torch.eye(3), loss_before=f))
    torch.testing.assert_close(-soft.w, torch.softmax(0.5 * f, 0))


# -- float32 overflow: norms past 1.8e19 ------------------------------------------------------
def f32_cohort(rows, loss):
    c = make_cohort(rows, loss_before=loss)
    return c.replace(deltas=c.deltas.float())


def test_fedfv_large_float32_updates_are_not_rescaled_to_zero():
    # Prepare: orthogonal updates of norms 1e20 and 2e20 (||.||^2 overflows float32)
    cohort = f32_cohort([[1e20, 0.0], [0.0, 2e20]], [1.0, 2.0])
    # Execute
    _, state, diag = one_round(get("fedfv")(alpha=0.0, tau=0), cohort, w0=[0.0, 0.0])
    # Assert: no conflict, so g is the plain mean (5e19, 1e20), rescaled to its own norm
    expected = torch.tensor([5e19, 1e20])
    torch.testing.assert_close(-state.w.float(), expected, rtol=1e-6, atol=0)
    assert diag["server/d_norm"] == pytest.approx(math.hypot(5e19, 1e20), rel=1e-6)


def test_fedfv_history_projection_with_large_float32_updates():
    algo = get("fedfv")(alpha=0.0, tau=1)
    big = f32_cohort([[1e20, 0.0], [-1e20, 1e20]], [1.0, 2.0])
    state = algo.init(torch.zeros(2), num_clients=4)
    state, _ = algo.server_update(state, big)
    nxt = f32_cohort([[-1e20, 1e19]], [1.0]).replace(client_ids=torch.tensor([2]))
    state, diag = algo.server_update(state, nxt)
    assert torch.isfinite(state.w).all() and diag["server/d_norm"] > 1e19


def test_qfedavg_large_float32_updates_give_the_float64_step():
    rows, loss = [[1e20, 0.0], [0.0, -2e20]], [1.0, 4.0]
    algo = get("qfedavg")(q=1.0)
    _, s32, _ = one_round(algo, f32_cohort(rows, loss), w0=[0.0, 0.0])
    _, s64, _ = one_round(algo, make_cohort(rows, loss_before=loss))
    # step = L F g / sum h ~ 1e-22: tiny but not zero (its coefficients are below float32's
    # smallest normal number, so the weighted sum runs in float64)
    assert float(s64.w.abs().max()) > 0
    torch.testing.assert_close(s32.w.double(), s64.w, rtol=1e-5, atol=0)


# -- the common-descent diagnostic --------------------------------------------------------------
def test_adafed_drops_a_dependent_client_and_harms_it():
    # (1, 0) and (-1, 0): the second is spanned by the first, AdaFed leaves it out of the basis
    cohort = make_cohort([[1.0, 0.0], [-1.0, 0.0]], loss_after=[1.0, 1.0])
    _, state, diag = one_round(get("adafed")(gamma=1.0), cohort)
    torch.testing.assert_close(state.w, torch.tensor([-1.0, 0.0], dtype=torch.float64))
    assert diag["server/basis_size"] == 1.0
    assert diag["server/min_cos"] == -1.0 and diag["server/harmed"] == 1.0


@pytest.mark.parametrize("name", names())
def test_every_rule_logs_min_cos_and_harmed(name):
    # (1, 0) and (-1, 1): FedAvg-like rules harm client 0, MGDA (eps = 1) harms nobody
    cohort = make_cohort([[1.0, 0.0], [-1.0, 1.0], [0.5, 0.5]], personal=torch.zeros(3, 2))
    kwargs = {"f": 0} if name in ("krum", "multikrum") else {}
    _, _, diag = one_round(build({"name": name, **kwargs}), cohort)
    assert -1.0 <= diag["server/min_cos"] <= 1.0
    assert diag["server/harmed"] in (0.0, 1.0, 2.0, 3.0)
    if name in ("fedmgda", "fedmgda_plus", "mgda_prox"):
        assert diag["server/harmed"] == 0.0 and diag["server/min_cos"] > 0
    # a round that writes no row skips the three diagnostics; the update is the same
    algo = build({"name": name, **kwargs})
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=3)
    full, with_diag = algo.server_update(state, cohort)
    bare, without = algo.server_update(state, cohort, diagnose=False)
    assert torch.equal(full.w, bare.w)
    assert without == {k: v for k, v in with_diag.items()
                       if k not in ("server/d_norm", "server/min_cos", "server/harmed")}


def test_fedavg_harm_by_hand():
    # uniform mean of (1, 0) and (-3, 1) is (-1, 0.5): cos with (1, 0) = -1/sqrt(1.25)
    cohort = make_cohort([[1.0, 0.0], [-3.0, 1.0]])
    _, _, diag = one_round(get("fedavg")(weighting="uniform"), cohort)
    assert diag["server/min_cos"] == pytest.approx(-1 / math.sqrt(1.25), abs=1e-15)
    assert diag["server/harmed"] == 1.0


# -- FedMGDA+ and a zero update -----------------------------------------------------------------
def test_fedmgda_plus_stops_when_one_client_sends_a_zero_update():
    # the min-norm point of a hull that contains 0 is 0: eps = 1 gives no step (as MGDA)
    cohort = make_cohort([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
    _, state, diag = one_round(get("fedmgda_plus")(), cohort)
    assert float(state.w.abs().max()) < 1e-8 and diag["server/d_norm"] < 1e-8
    _, moved, _ = one_round(get("fedmgda_plus")(epsilon=0.1), cohort)   # a box keeps it moving
    assert float(moved.w.abs().max()) > 0.1
