"""Metric functions on hand-computed vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedmoo.report.metrics import (
    accuracy_metrics,
    angle_to_uniform,
    kl_to_uniform,
    percentile_sorted,
    tail_mean,
)


def test_suite_on_four_clients():
    acc = np.array([50.0, 100.0, 75.0, 25.0])
    count = np.array([2, 4, 4, 4])
    correct = np.array([1, 4, 3, 1])
    loss = np.array([1.0, 0.0, 0.5, 1.5])
    m = accuracy_metrics(acc, correct, count, loss, prefix="test")
    assert m["test/acc_mean"] == pytest.approx(62.5)
    assert m["test/acc_pooled"] == pytest.approx(100 * 9 / 14)
    assert m["test/acc_std"] == pytest.approx(math.sqrt(((12.5**2) * 2 + 37.5**2 * 2) / 4))
    assert m["test/acc_var"] == pytest.approx(m["test/acc_std"] ** 2)
    # int(p% of 4) = 0 for every tail -> at least one client
    assert m["test/acc_worst10"] == 25.0 and m["test/acc_best10"] == 100.0
    assert m["test/acc_p5"] == pytest.approx(np.percentile(acc, 5))
    assert m["test/loss_mean"] == pytest.approx(0.75)
    assert m["test/acc_client1"] == 100.0


def test_percentile_of_sorted_values_is_numpys_to_the_bit():
    # by hand: 4 values, q=5 -> position 0.15 between 25 and 50: 28.75; q=95 -> 2.85: 96.25
    s = np.array([25.0, 50.0, 75.0, 100.0])
    assert percentile_sorted(s, 5) == pytest.approx(28.75)
    assert percentile_sorted(s, 95) == pytest.approx(96.25)
    assert percentile_sorted(np.array([7.0]), 5) == 7.0
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 31, 100):
        v = np.sort(rng.uniform(0, 100, n))
        for q in (0, 5, 37.5, 50, 95, 100):
            assert percentile_sorted(v, q) == float(np.percentile(v, q))


def test_tail_mean_truncates():
    a = np.arange(20, dtype=float)          # int(0.2 * 20) = 4 clients
    assert tail_mean(a, 20, worst=True) == pytest.approx(1.5)
    assert tail_mean(a, 20, worst=False) == pytest.approx(17.5)
    assert tail_mean(a, 5, worst=True) == 0.0


def test_angle_and_kl():
    assert angle_to_uniform(np.array([80.0, 80.0, 80.0])) == pytest.approx(0.0, abs=1e-6)
    assert angle_to_uniform(np.array([1.0, 0.0])) == pytest.approx(45.0)
    assert kl_to_uniform(np.array([5.0, 5.0])) == pytest.approx(0.0)
    assert kl_to_uniform(np.array([1.0, 0.0])) == pytest.approx(math.log(2))


def test_no_per_client_columns_for_large_federations():
    n = 11
    m = accuracy_metrics(np.full(n, 50.0), np.ones(n), np.full(n, 2), np.zeros(n))
    assert not any("acc_client" in k for k in m)
