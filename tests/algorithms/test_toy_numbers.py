"""Hand-computed toy numbers (from the algorithm specification), one server round each (w_t = 0 so w_{t+1} = -step)."""

from __future__ import annotations

import math

import pytest
import torch

from fedmoo.algorithms import get
from tests.algorithms.cohorts import make_cohort, one_round


def test_qfedavg_toy():
    # Prepare: w_t=0, lr=0.1 (L=10), w_1=-0.2, w_2=0.1 (g = w_t - w_k), F=(1,4), q=1
    cohort = make_cohort([[0.2], [-0.1]], loss_before=[1.0, 4.0], local_lr=0.1)
    # Execute
    _, state, diag = one_round(get("qfedavg")(q=1.0), cohort)
    # Assert: h = (14, 41), w_{t+1} = -(2*1 + (-1)*4)/55 = 2/55
    assert diag["server/h_sum"] == pytest.approx(55.0)
    assert float(state.w[0]) == pytest.approx(2 / 55, abs=1e-9)  # F carries +1e-10
    assert float(state.w[0]) == pytest.approx(0.0363636, abs=1e-7)


@pytest.mark.parametrize("alpha,expected", [
    (0.0, (0.158114, 0.474342)),
    (0.5, (-0.158114, 0.474342)),
    (1.0, (0.0, 0.5)),
])
def test_fedfv_toy(alpha, expected):
    # Prepare: g_1=(1,0) loss 1, g_2=(-1,1) loss 2, tau=0
    cohort = make_cohort([[1.0, 0.0], [-1.0, 1.0]], loss_before=[1.0, 2.0])
    # Execute
    _, state, diag = one_round(get("fedfv")(alpha=alpha, tau=0), cohort)
    # Assert: the step g equals the spec's numbers (exactly (1, 3)/(2 sqrt 10) at alpha 0)
    torch.testing.assert_close(-state.w, torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)
    if alpha == 0.0:
        exact = torch.tensor([1.0, 3.0], dtype=torch.float64) / (2 * math.sqrt(10))
        torch.testing.assert_close(-state.w, exact, atol=1e-15, rtol=0)
    assert diag["server/kept"] == {0.0: 0, 0.5: 1, 1.0: 2}[alpha]


def test_adafed_toy():
    s = 1 / math.sqrt(2)
    cohort = make_cohort([[1.0, 0.0], [s, s]], loss_after=[1.0, 2.0])
    _, state, _ = one_round(get("adafed")(gamma=1.0), cohort)
    torch.testing.assert_close(-state.w, torch.tensor([0.230248, 0.420991], dtype=torch.float64),
                               atol=1e-6, rtol=0)


def test_term_reference_normaliser_over_two_rounds():
    # Prepare: F=(1,2,3), t=1, K=3, g_k = e_k so w moves by -(1/K) omega
    f = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    cohort = make_cohort(torch.eye(3), loss_before=f)
    algo = get("term")(t=1.0)
    # Execute
    _, s1, _ = one_round(algo, cohort)
    s2, _ = algo.server_update(s1, cohort)
    # Assert: e = exp(F - 3); est_1 = mean(e)/2, omega = e/(est K) = (0.180, 0.489, 1.330), sum 2
    e = torch.exp(f - 3.0)
    est1 = 0.5 * e.mean()
    omega1 = e / (est1 * 3)
    torch.testing.assert_close(omega1, torch.tensor([0.18006, 0.48946, 1.33048], dtype=torch.float64),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(-s1.w, omega1 / 3)
    est2 = 0.5 * est1 + 0.5 * e.mean()
    torch.testing.assert_close(s2.est, est2)
    torch.testing.assert_close(-s2.w, omega1 / 3 + e / (est2 * 3) / 3)


def test_afl_lambda_projection_and_averaged_iterate():
    # Prepare: 2 clients, g_1=(1,0), g_2=(0,1), losses (1.25, 0.15), gamma_lambda=1
    cohort = make_cohort([[1.0, 0.0], [0.0, 1.0]], loss_before=[1.25, 0.15])
    algo = get("afl")(gamma_lambda=1.0)
    # Execute
    _, s1, diag = one_round(algo, cohort)
    s2, _ = algo.server_update(s1, cohort)
    # Assert: lam (0.5,0.5) + (1.25,0.15) -> Proj = (1, 0); w_1 = -(0.5,0.5); w_2 = w_1 - g_1;
    # the evaluated model is the average of w_1 and w_2
    assert s1.lam.tolist() == [1.0, 0.0] and diag["server/lambda_max"] == 1.0
    torch.testing.assert_close(s1.w, torch.tensor([-0.5, -0.5], dtype=torch.float64))
    torch.testing.assert_close(s2.w, torch.tensor([-1.5, -0.5], dtype=torch.float64))
    torch.testing.assert_close(algo.eval_params(s2), torch.tensor([-1.0, -0.5], dtype=torch.float64))
    assert torch.equal(get("afl")(average_iterates=False).eval_params(s2), s2.w)


def test_fedfa_weights_momentum_and_frequencies():
    # Prepare: acc (50, 100)%, clients 0 and 1; then a round with client 0 alone, then both
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    both = make_cohort(x, acc_before=[50.0, 100.0], local_lr=0.1)
    algo = get("fedfa")(beta=0.5, gamma=0.5)
    # Execute
    _, s1, _ = one_round(algo, both)
    # Assert: A = -log2(1/3 + 1e-6), -log2(2/3 + 1e-6); equal frequencies -> Q shares 1/2
    a = torch.tensor([-math.log2(1 / 3 + 1e-6), -math.log2(2 / 3 + 1e-6)], dtype=torch.float64)
    p = 0.5 * a / a.sum() + 0.5 * torch.tensor([0.5, 0.5], dtype=torch.float64)
    m1 = -0.5 * (p @ x)                              # gamma*0 + (1-gamma)(w_avg - w_t)
    torch.testing.assert_close(s1.momentum, m1)
    torch.testing.assert_close(s1.w, -(p @ x) - 0.1 * m1)
    s2, _ = algo.server_update(s1, make_cohort(x[:1], acc_before=[70.0], local_lr=0.1))
    assert s2.freq.tolist() == [2.0, 1.0]
    s3, _ = algo.server_update(s2, both)
    assert s3.freq.tolist() == [3.0, 2.0]
    q = torch.tensor([-math.log2(1 - 3 / 5 + 1e-5), -math.log2(1 - 2 / 5 + 1e-5)], dtype=torch.float64)
    p3 = 0.5 * a / a.sum() + 0.5 * q / q.sum()
    m3 = 0.5 * s2.momentum - 0.5 * (p3 @ x)
    torch.testing.assert_close(s3.w, s2.w - p3 @ x - 0.1 * m3)


def test_robust_aggregators_hand_values():
    x = torch.tensor([[0.0], [1.0], [2.0], [4.0], [100.0]], dtype=torch.float64)
    cohort = make_cohort(x)
    # median of (0, 1, 2, 4, 100) is 2; of (1, 3, 10, 100) it is 6.5
    assert float(one_round(get("median")(), cohort)[1].w) == -2.0
    even = make_cohort([[1.0], [3.0], [10.0], [100.0]])
    assert float(one_round(get("median")(), even)[1].w) == -6.5
    # trimmed mean, beta 0.25 of K=4 -> drop one per side: mean(3, 10)
    assert float(one_round(get("trimmed_mean")(beta=0.25), even)[1].w) == -6.5
    # Krum, f=1: score = sum of the 2 smallest squared distances: (5, 2, 5, 13, ...) -> picks 1.0
    _, s, diag = one_round(get("krum")(f=1), cohort)
    assert float(s.w) == -1.0 and diag["server/krum_client"] == 1.0
    # Multi-Krum: m=3 -> mean(0, 1, 2); default m = K - f = 4 -> mean(0, 1, 2, 4)
    assert float(one_round(get("multikrum")(f=1, m=3), cohort)[1].w) == pytest.approx(-1.0)
    assert float(one_round(get("multikrum")(f=1), cohort)[1].w) == pytest.approx(-1.75)


@pytest.mark.parametrize("tau,history,expected_w2", [
    (1, "paper", (-1.0, -math.sqrt(2))),   # round 1 projected off client 0's round-0 update
    (1, "flgo", (0.0, -1.0)),              # flgo looks at round 1 only: no conflict
    (2, "paper", (0.0, -1.0)),             # t = 1 < tau: no external step yet
])
def test_fedfv_external_conflicts_with_history(tau, history, expected_w2):
    # Prepare: round 0 client 0 sends (1, 0); round 1 client 1 sends (-1, 1)
    algo = get("fedfv")(alpha=0.0, tau=tau, history=history)
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=3)
    # Execute
    s1, _ = algo.server_update(state, make_cohort([[1.0, 0.0]], ids=[0]))
    s2, _ = algo.server_update(s1, make_cohort([[-1.0, 1.0]], ids=[1]))
    # Assert
    torch.testing.assert_close(s1.w, torch.tensor([-1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(s2.w, torch.tensor(expected_w2, dtype=torch.float64))
    assert s2.last_round.tolist() == [0, 1, -1]
    torch.testing.assert_close(s2.history[:2], torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64))


@pytest.mark.parametrize("history,expected", [
    ("paper", (0.5, -0.05)),          # round 0 < tau = 1: no external step, w = -mean
    ("flgo", (0.0, -0.502494)),       # FLGo's round 1 = our round 0: projected off client 0
])
def test_fedfv_flgo_history_starts_one_round_earlier(history, expected):
    # alpha = 1 keeps both updates: g = mean((1, 0), (-2, 0.1)) = (-0.5, 0.05). flgo at round 0
    # (FLGo's current_round 1 >= tau 1) projects g off this round's conflicting client 0:
    # <(1, 0), g> = -0.5 < 0 -> g = (0, 0.05), rescaled to ||mean|| = sqrt(0.2525) = 0.502494.
    algo = get("fedfv")(alpha=1.0, tau=1, history=history)
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=2)
    s1, _ = algo.server_update(state, make_cohort([[1.0, 0.0], [-2.0, 0.1]], ids=[0, 1]))
    torch.testing.assert_close(s1.w, torch.tensor(expected, dtype=torch.float64),
                               atol=1e-6, rtol=0)


def test_ditto_personal_models_travel_through_the_state():
    # Prepare: 4 clients, personal models start at w0; clients 1 and 3 are sampled
    algo = get("ditto")(lam=0.2)
    state = algo.init(torch.tensor([1.0, 2.0], dtype=torch.float64), num_clients=4)
    spec = algo.client_spec(state, torch.tensor([1, 3]))
    assert spec.personal_lam == 0.2 and spec.personal.tolist() == [[1.0, 2.0], [1.0, 2.0]]
    trained = torch.tensor([[5.0, 5.0], [7.0, 7.0]], dtype=torch.float64)
    cohort = make_cohort([[1.0, 0.0], [0.0, 1.0]], ids=[1, 3], personal=trained)
    # Execute
    new, _ = algo.server_update(state, cohort)
    # Assert: sampled rows replaced, others stale; global model = uniform FedAvg
    assert algo.eval_params(new).tolist() == [[1.0, 2.0], [5.0, 5.0], [1.0, 2.0], [7.0, 7.0]]
    assert algo.extra_eval_params(new)["global"].tolist() == [0.5, 1.5]
    assert state.personal.tolist() == [[1.0, 2.0]] * 4          # the old state is untouched


def test_qfedavg_under_a_1000_bias_moves_the_model_to_the_attackers_local_model():
    # FedMGDA+ B.2 on the mean-loss scale (algo.loss_report=mean, the default): the PhD client
    # reports its mean loss + 1000. (On the batch-sum scale of the authors' code, where the
    # other client reports ~2,572 x its mean loss, a bias of 1000 weighs far less:
    # docs/results/fedmgda_plus_adult_bias.md, tests/algorithms/test_loss_report.py.)
    # With q = 5 and L = 1 / lr = 100, F = (1000.35, 0.45) and unit updates:
    # h_k = q F_k^4 L^2 ||g_k||^2 + L F_k^5; coef_k = L F_k^5 / sum h. The attacker's h is
    # L F^5 (1 + q L / F) = 1.4998 * L F^5, so its coefficient is 1 / 1.4998 = 0.6668 and the
    # honest client's is (0.45 / 1000.35)^5 / 1.4998 = 1.2e-17: the step is 2/3 of the PhD
    # client's own local update and nothing of the other client's, every round.
    f = torch.tensor([1000.35, 0.45], dtype=torch.float64)
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    algo = get("qfedavg")(q=5.0)
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=2)
    s1, _ = algo.server_update(state, make_cohort(g, loss_before=f, local_lr=0.01))
    coef_phd = 1.0 / (1.0 + 5.0 * 100.0 / 1000.35)
    torch.testing.assert_close(-s1.w, torch.tensor([coef_phd, 0.0], dtype=torch.float64),
                               atol=1e-15, rtol=1e-12)
    assert 0 < -float(s1.w[1]) < 1e-16
    # Without the bias (F = (0.35, 0.45)) both clients move the model, in the ratio F_k^5.
    s0, _ = algo.server_update(state, make_cohort(g, loss_before=f - torch.tensor([1000.0, 0.0],
                                                  dtype=torch.float64), local_lr=0.01))
    assert float(s0.w[0] / s0.w[1]) == pytest.approx((0.35 / 0.45) ** 5, rel=1e-9)
