"""``Algorithm.reads_before`` is what each rule reads: a rule that says True fails without the
cohort's before-pass (``loss_before`` / ``acc_before``), one that says False gives the same new
model without it. The runner skips that pass on rounds that write no row for the latter
(tests/run/test_before_pass.py)."""

from __future__ import annotations

import pytest
import torch

from fedmoo import algorithms
from tests.algorithms.cohorts import make_cohort, one_round, ramp
from tests.algorithms.test_fmgda import fmol_cohort

K = 7   # enough clients for Krum's 2f + 3
SWITCHED = [("qfedavg", {"loss_at": "after"}), ("adafed", {"loss": "trained"}), ("adafed", {"loss": "global"}),
            ("adafed", {"loss": "local_last"}), ("fedfa", {"acc_at": "after"})]
CASES = [(name, {}) for name in algorithms.names()] + SWITCHED


def cohort_for(name: str):
    if name in ("fmgda", "fsmgda"):
        return fmol_cohort()
    g = torch.Generator().manual_seed(0)
    deltas = torch.randn(K, 4, generator=g, dtype=torch.float64)
    c = make_cohort(deltas, personal=deltas * 0.5 if name == "ditto" else None)
    return c.replace(loss_trained=ramp(K) / 3, acc_trained=torch.linspace(30.0, 90.0, K,
                                                                          dtype=torch.float64))


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}{kw or ''}" for n, kw in CASES])
def test_a_rule_reads_the_before_pass_exactly_when_it_says_so(name, kwargs):
    algo = algorithms.build({"name": name, **kwargs})
    full = cohort_for(name)
    without = full.replace(loss_before=None, acc_before=None)
    w0 = torch.zeros(full.deltas.shape[-1], dtype=torch.float64)   # [K, S, d] deltas for FMOL
    if algo.reads_before:
        with pytest.raises(ValueError, match=r"needs cohort\.(loss|acc)_before"):
            one_round(algo, without, w0)
    else:
        _, a, _ = one_round(algo, full, w0)
        _, b, _ = one_round(algo, without, w0)
        assert torch.equal(a.w, b.w)


def test_the_rules_of_the_fairness_papers_that_read_it():
    reads = sorted(n for n, kw in CASES if not kw and algorithms.build({"name": n}).reads_before)
    assert reads == ["afl", "fedfa", "fedfv", "qfedavg", "term"]
