"""Client sampling: uniform, and in proportion to data size (``sampling=weighted``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedmoo.errors import UserError
from fedmoo.config.schema import check
from fedmoo.run.loop import run
from fedmoo.run.sampler import ClientSampler
from tests.conftest import small_cfg

SIZES = np.array([1, 2, 3, 4])          # p = (0.1, 0.2, 0.3, 0.4)
ROUNDS = 5_000


def inclusion_frequencies(sampler: ClientSampler, n: int) -> np.ndarray:
    counts = np.zeros(n)
    for t in range(ROUNDS):
        counts[sampler.sample(t).numpy()] += 1
    return counts / ROUNDS


def successive_inclusion(p: np.ndarray, k: int) -> np.ndarray:
    """Exact inclusion probabilities of drawing k of len(p) without replacement, each draw with
    p renormalised over the clients not drawn yet (numpy's choice(replace=False, p=p))."""
    pi = np.zeros(len(p))
    for seq in itertools.permutations(range(len(p)), k):
        prob, left = 1.0, 1.0
        for i in seq:
            prob *= p[i] / left
            left -= p[i]
        pi[list(seq)] += prob
    return pi


def close(freq: np.ndarray, pi: np.ndarray) -> bool:
    """Within 5 binomial standard deviations of ROUNDS draws."""
    return bool(np.all(np.abs(freq - pi) <= 5 * np.sqrt(pi * (1 - pi) / ROUNDS) + 1e-12))


def test_one_client_per_round_is_drawn_with_probability_n_k_over_n():
    freq = inclusion_frequencies(ClientSampler(4, 1, seed=0, scheme="weighted", sizes=SIZES), 4)
    assert close(freq, SIZES / SIZES.sum())


def test_two_of_four_match_the_exact_inclusion_probabilities():
    pi = successive_inclusion(SIZES / SIZES.sum(), 2)
    # by hand for client 0: 0.1 + 0.2*0.1/0.8 + 0.3*0.1/0.7 + 0.4*0.1/0.6 = 0.2345238...
    assert pi[0] == pytest.approx(0.1 + 0.025 + 0.3 / 7 + 0.4 / 6)
    assert pi.sum() == pytest.approx(2.0)
    freq = inclusion_frequencies(ClientSampler(4, 2, seed=1, scheme="weighted", sizes=SIZES), 4)
    assert close(freq, pi)
    uniform = inclusion_frequencies(ClientSampler(4, 2, seed=1), 4)
    assert close(uniform, np.full(4, 0.5))


def test_forced_clients_join_and_the_rest_is_weighted_among_the_others():
    s = ClientSampler(4, 2, seed=2, forced=[3], scheme="weighted", sizes=SIZES)
    freq = inclusion_frequencies(s, 4)
    assert freq[3] == 1.0
    assert close(freq[:3], np.array([1.0, 2.0, 3.0]) / 6)


def test_weighted_sampling_is_reproducible_and_seeded():
    a = ClientSampler(30, 10, seed=4, scheme="weighted", sizes=np.arange(1, 31))
    b = ClientSampler(30, 10, seed=4, scheme="weighted", sizes=np.arange(1, 31))
    assert all(a.sample(t).tolist() == b.sample(t).tolist() for t in range(20))
    assert a.sample(7).tolist() == sorted(set(a.sample(7).tolist())) and len(a.sample(7)) == 10
    c = ClientSampler(30, 10, seed=5, scheme="weighted", sizes=np.arange(1, 31))
    assert any(a.sample(t).tolist() != c.sample(t).tolist() for t in range(5))
    # the exact scheme: numpy's choice without replacement with p = n_k / n
    rng = np.random.default_rng([4, 7, 7])
    n = np.arange(1, 31)
    assert a.sample(7).tolist() == sorted(rng.choice(30, 10, replace=False, p=n / n.sum()).tolist())


def test_uniform_draws_are_unchanged():
    s = ClientSampler(30, 10, seed=4)
    rng = np.random.default_rng([4, 7, 7])
    assert s.sample(7).tolist() == sorted(rng.choice(30, 10, replace=False).tolist())


def test_bad_schemes_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="sampling='size'"):
        check(small_cfg(sampling="size"))
    with pytest.raises(UserError, match="only 1 have training samples"):
        ClientSampler(3, 2, seed=0, scheme="weighted", sizes=[0, 5, 0])


def test_a_weighted_run_samples_differently_and_replays(tmp_path):
    a = run(small_cfg(sampling="weighted"), tmp_path / "a")
    b = run(small_cfg(sampling="weighted"), tmp_path / "b")
    u = run(small_cfg(), tmp_path / "u")
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]  # noqa: E731
    assert strip(a.rows) == strip(b.rows)
    assert strip(a.rows) != strip(u.rows)


@pytest.mark.parametrize("forced,scheme", [((), "uniform"), ((0, 3), "uniform"), ((), "weighted")])
def test_a_cohort_of_every_client_is_every_client_in_order(forced, scheme):
    s = ClientSampler(4, 4, seed=7, forced=forced, scheme=scheme, sizes=SIZES)
    assert all(s.sample(t).tolist() == [0, 1, 2, 3] for t in range(3))
