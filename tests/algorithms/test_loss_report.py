"""How clients report their loss (``algo.loss_report`` of q-FedAvg, ``ClientSpec.loss_report``)
and AFL's ``algo.loss``: hand-computed numbers through the path a round takes (the algorithm's
client spec, the clients' report, the attack, the server step)."""

from __future__ import annotations

import pytest
import torch

from fedmoo import attacks
from fedmoo.algorithms import build, get
from fedmoo.config.schema import Client
from fedmoo.engine.base import as_reported
from fedmoo.errors import UserError
from fedmoo.state import ClientSpec
from tests.algorithms.cohorts import make_cohort


def two_clients():
    """Client 0: 25 training samples (3 minibatches of 10: 10, 10, 5), mean loss 0.4; client 1:
    7 samples (1 minibatch), mean loss 0.5; it is the attacker. Updates g = (1, 0) and (0, 2)."""
    return make_cohort([[1.0, 0.0], [0.0, 2.0]], loss_before=[0.4, 0.5], loss_after=[0.3, 0.6],
                       num_samples=[25.0, 7.0], local_lr=0.01)


def test_batch_sum_reports_the_mean_times_the_minibatches_and_keeps_the_training_loss():
    cohort = two_clients().replace(loss_trained=torch.tensor([0.2, 0.1], dtype=torch.float64))
    spec = get("qfedavg")(q=1.0, loss_report="batch_sum").client_spec(None, cohort.client_ids)
    assert spec.loss_report == "batch_sum"
    out = as_reported(cohort, spec, Client(batch_size=10))
    assert out.loss_before.tolist() == pytest.approx([0.4 * 3, 0.5 * 1])    # 1.2, 0.5
    assert out.loss_trained.tolist() == pytest.approx([0.2 * 3, 0.1 * 1])
    assert out.loss_after.tolist() == [0.3, 0.6]         # measured during training: a mean
    assert cohort.loss_before.tolist() == [0.4, 0.5]     # the measured cohort is untouched
    # batch 4: 7 and 2 minibatches; full batch (None): one, the mean itself
    assert as_reported(cohort, spec, Client(batch_size=4)).loss_before.tolist() == \
        pytest.approx([0.4 * 7, 0.5 * 2])
    assert as_reported(cohort, spec, Client(batch_size=None)).loss_before.tolist() == \
        pytest.approx([0.4, 0.5])
    # the default (mean) reports the cohort as measured
    mean = get("qfedavg")(q=1.0).client_spec(None, cohort.client_ids)
    assert mean.loss_report == "mean"
    assert as_reported(cohort, mean, Client(batch_size=10)) is cohort


def test_qfedavg_on_the_batch_sum_with_a_bias_added_to_it():
    # Reported: F = (0.4 * 3, 0.5 * 1) = (1.2, 0.5); the bias attack adds b = 1 to what the
    # attacker (client 1) reports: F = (1.2, 1.5). q = 1, L = 1:
    # h_k = q F^0 L^2 ||g_k||^2 + L F_k = (1 + 1.2, 4 + 1.5) = (2.2, 5.5), sum 7.7;
    # w_1 = -(1.2 g_0 + 1.5 g_1) / 7.7 = -(1.2, 3.0) / 7.7 = (-0.155844, -0.389610).
    algo = build({"name": "qfedavg", "q": 1.0, "L": 1.0, "loss_report": "batch_sum"})
    cohort = two_clients()
    spec = algo.client_spec(None, cohort.client_ids)
    bias = attacks.create({"name": "bias", "malicious": [1], "b": 1.0}).bind(2)
    seen = bias.apply(as_reported(cohort, spec, Client(batch_size=10)), seed=0)
    assert seen.loss_before.tolist() == pytest.approx([1.2, 1.5])
    state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=2)
    new, diag = algo.server_update(state, seen)
    assert diag["server/h_sum"] == pytest.approx(7.7)
    torch.testing.assert_close(new.w, torch.tensor([-1.2 / 7.7, -3.0 / 7.7], dtype=torch.float64))
    assert new.w.tolist() == pytest.approx([-0.155844, -0.389610], abs=1e-6)
    # On the mean scale the same bias weighs far more: F = (0.4, 1.5), h = (1.4, 5.5), sum 6.9
    mean = build({"name": "qfedavg", "q": 1.0, "L": 1.0})
    seen = bias.apply(as_reported(cohort, mean.client_spec(None, cohort.client_ids),
                                  Client(batch_size=10)), seed=0)
    new, _ = mean.server_update(mean.init(torch.zeros(2, dtype=torch.float64), 2), seen)
    assert new.w.tolist() == pytest.approx([-0.4 / 6.9, -3.0 / 6.9])


def test_a_bad_loss_report_is_refused_in_one_line():
    with pytest.raises(UserError, match="loss_report"):
        build({"name": "qfedavg", "loss_report": "sum"})
    with pytest.raises(ValueError, match="mean | batch_sum"):
        as_reported(two_clients(), ClientSpec(loss_report="sum"), Client(batch_size=10))


def test_afl_lambda_step_on_the_loss_of_the_last_local_epoch():
    # lam_0 = (1/2, 1/2), gamma_lambda = 0.1. loss: before reads (0.4, 0.5): lam + 0.1 F =
    # (0.54, 0.55), projected onto the simplex: (0.495, 0.505). local_last reads loss_after
    # (0.3, 0.6): (0.53, 0.56) -> (0.485, 0.515). The model step uses lam_0 both times.
    for loss, want in (("before", [0.495, 0.505]), ("local_last", [0.485, 0.515])):
        algo = build({"name": "afl", "gamma_lambda": 0.1, "loss": loss})
        assert algo.reads_before == (loss == "before")
        state = algo.init(torch.zeros(2, dtype=torch.float64), num_clients=2)
        new, _ = algo.server_update(state, two_clients())
        assert new.lam.tolist() == pytest.approx(want)
        assert new.w.tolist() == pytest.approx([-0.5, -1.0])


def test_a_run_hands_the_rule_the_reported_losses_alone_and_trained_together(tmp_path,
                                                                          monkeypatch):
    """The runner applies the spec's loss_report to the trained cohort before the attack (and
    the rule); a lockstep group gives each run's numbers as alone."""
    from fedmoo.algorithms.qfedavg import QFedAvg
    from fedmoo.cli.config import compose
    from fedmoo.engine import stacked
    from fedmoo.run import group, loop
    from tests.run.test_group import _compare

    def cfg(report):
        return compose(["data=synthetic", "num_clients=6", "clients_per_round=3", "rounds=3",
                        "eval_every=1", "data.max_samples=60", "engine=batched",
                        "algo=qfedavg", f"algo.loss_report={report}", "precision=float64",
                        "device=cpu", "progress=false", "checkpoint_every=0",
                        "client.batch_size=8", "attack=bias", "attack.malicious=[0]",
                        "attack.b=0.5", "attack.always_participate=true"])

    trained, seen = [], []
    rows, step = stacked.train_rows, QFedAvg.step

    def record_rows(engine, members):
        out = rows(engine, members)
        trained.extend(out)
        return out

    def record_step(self, state, cohort):
        seen.append(cohort)
        return step(self, state, cohort)

    monkeypatch.setattr("fedmoo.engine.batched.train_rows", record_rows)
    monkeypatch.setattr(QFedAvg, "step", record_step)
    loop.run(cfg("batch_sum"), tmp_path / "alone")
    assert len(trained) == len(seen) == 3
    for c, s in zip(trained, seen):
        batches = (c.num_samples / 8).ceil()
        bias = 0.5 * (c.client_ids == 0).to(c.loss_before.dtype)
        torch.testing.assert_close(s.loss_before, c.loss_before * batches + bias)
        assert bool((batches > 1).any()) and bool((c.client_ids == 0).any())
    group.run_jobs([group.Job(cfg(r), tmp_path / "grouped" / r) for r in ("batch_sum", "mean")])
    _compare(tmp_path / "alone", tmp_path / "grouped" / "batch_sum")
