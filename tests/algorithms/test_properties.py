"""Properties: MGDA common descent, AdaFed's f^gamma rates and order invariance, equivariance."""

from __future__ import annotations

import dataclasses
import pytest
import torch

from fedmoo.algorithms import build, get, names
from fedmoo.state import state_to_dict
from tests.algorithms.cohorts import make_cohort, one_round


def random_cohort(k=6, d=10, seed=0, **kw):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(k, d, generator=gen, dtype=torch.float64) + 0.2
    loss = torch.rand(k, generator=gen, dtype=torch.float64) + 0.5
    return make_cohort(x, loss_before=loss, loss_after=loss / 2,
                       personal=torch.zeros(k, d, dtype=torch.float64), **kw)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_fedmgda_eps1_gives_a_common_descent_direction(normalize, seed):
    # Prepare
    cohort = random_cohort(seed=seed)
    g = cohort.deltas
    if normalize:
        g = g / g.norm(dim=1, keepdim=True)
    # Execute: w_t = 0 and eta = 1, so d = -w_{t+1}
    _, state, diag = one_round(get("fedmgda")(epsilon=1.0, normalize=normalize), cohort)
    d = -state.w
    # Assert: <g_k, d> >= ||d||^2 for every k (KKT of the min-norm QP), equality where lam_k > 0
    dots = g @ d
    assert bool((dots >= d @ d - 1e-9).all())
    assert float(dots.min()) == pytest.approx(float(d @ d), abs=1e-9)
    assert 0 < diag["server/lambda_max"] <= 1 and diag["server/qp_fallback"] == 0.0


@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.5])
def test_adafed_rates_proportional_to_f_gamma_and_order_free(gamma):
    cohort = random_cohort(k=5, d=12, seed=1)
    algo = get("adafed")(gamma=gamma, eta=1.0)
    d = -one_round(algo, cohort)[1].w
    f = cohort.loss_after ** gamma
    torch.testing.assert_close(cohort.deltas @ d, (d @ d) * f, atol=1e-10, rtol=0)
    perm = torch.tensor([3, 0, 4, 2, 1])
    shuffled = make_cohort(cohort.deltas[perm], loss_after=cohort.loss_after[perm], ids=perm)
    torch.testing.assert_close(-one_round(algo, shuffled, num_clients=5)[1].w, d, atol=1e-10, rtol=0)


def test_adafed_global_loss_and_normalize_options():
    cohort = random_cohort(k=4, d=9, seed=2)
    algo = get("adafed")(gamma=1.0, loss="global", normalize=True)
    d = -one_round(algo, cohort)[1].w
    unit = cohort.deltas / cohort.deltas.norm(dim=1, keepdim=True)
    torch.testing.assert_close(unit @ d, (d @ d) * cohort.loss_before, atol=1e-10, rtol=0)


ORDER_DEPENDENT = {("fedfv", "random")}


@pytest.mark.parametrize("name", names())
def test_permutation_equivariance(name):
    """Shuffling the cohort rows (ids with them) does not change the round's outcome."""
    algo = build({"name": name})
    cohort = random_cohort(k=6, d=10, seed=3)
    perm = torch.tensor([4, 1, 5, 0, 3, 2])
    shuffled = make_cohort(cohort.deltas[perm], loss_before=cohort.loss_before[perm],
                           loss_after=cohort.loss_after[perm], acc_before=cohort.acc_before[perm],
                           num_samples=cohort.num_samples[perm], ids=perm,
                           personal=cohort.personal[perm])
    s0 = algo.init(torch.zeros(10, dtype=torch.float64), num_clients=6)
    a1, _ = algo.server_update(s0, cohort)
    b1, _ = algo.server_update(s0, shuffled)
    a2, _ = algo.server_update(a1, cohort)
    b2, _ = algo.server_update(b1, shuffled)
    torch.testing.assert_close(algo.eval_params(a2), algo.eval_params(b2), atol=1e-8, rtol=0)
    torch.testing.assert_close(a2.w, b2.w, atol=1e-8, rtol=0)


def test_fedfv_random_order_is_seeded_and_differs_from_loss_order():
    cohort = random_cohort(k=6, d=3, seed=4)
    w = [one_round(get("fedfv")(alpha=0.0, tau=0, order=o, seed=s), cohort)[1].w
         for o, s in (("random", 0), ("random", 0), ("random", 1), ("loss", 0), ("reverse", 0))]
    assert torch.equal(w[0], w[1])
    assert not torch.allclose(w[0], w[2]) and not torch.allclose(w[3], w[4])


@pytest.mark.parametrize("name", names())
def test_state_survives_a_checkpoint_and_rounds_are_pure(name, tmp_path):
    """Saving the state after round 1 and resuming gives the same round 2; inputs are not mutated."""
    algo = build({"name": name}) if name != "fedfv" else build({"name": name, "order": "random", "tau": 1})
    cohort = random_cohort(k=6, d=10, seed=5)
    s0 = algo.init(torch.zeros(10, dtype=torch.float64), num_clients=6)
    before = {k: v.clone() for k, v in state_to_dict(s0).items() if isinstance(v, torch.Tensor)}
    s1, _ = algo.server_update(s0, cohort)
    for key, value in before.items():
        assert torch.equal(getattr(s0, key), value), f"server_update mutated state.{key}"
    torch.save(state_to_dict(s1), tmp_path / "state.pt")
    resumed = dataclasses.replace(algo.init(torch.zeros(10, dtype=torch.float64), num_clients=6),
                                  **torch.load(tmp_path / "state.pt"))
    direct, _ = algo.server_update(s1, cohort)
    again, _ = algo.server_update(resumed, cohort)
    assert again.round == direct.round == 2
    torch.testing.assert_close(algo.eval_params(again), algo.eval_params(direct), atol=0, rtol=0)
