"""Attacks through the runner: invariances the papers claim, every attack x every algorithm, reporting."""

from __future__ import annotations

import json

import pytest

from fedmoo import algorithms, attacks
from fedmoo.attacks.bias import Bias
from fedmoo.errors import DivergenceError
from fedmoo.run.loop import run
from tests.algorithms.test_registry import yaml_algo
from tests.conftest import small_cfg
from tests.inprocess import cli_in
from tests.conftest import declare_impl

FAST = {"client.batch_size": None}  # one full-batch step per client: keeps 150+ runs quick


def result(tmp_path, name, algo="fedavg", attack=None, **over):
    knobs = {"rounds": 3, "clients_per_round": None, **FAST, **over}
    cfg = small_cfg(algo=yaml_algo(algo, rounds=knobs["rounds"]),
                    attack=attack or {"name": "none", "malicious": [1]}, **knobs)
    return run(cfg, tmp_path / name)


def model_columns(rows):
    """Everything computed from the global model (not the reported losses, not timings)."""
    keep = ("test/", "benign/", "attackers/")
    return [{k: v for k, v in r.items() if k.startswith(keep)} for r in rows]


@pytest.mark.parametrize("algo", ["fedmgda_plus", "fedavg", "fedavg_n", "median", "trimmed_mean", "krum"])
def test_bias_leaves_loss_blind_rules_bit_identical(tmp_path, algo):
    clean = result(tmp_path, "clean", algo)
    biased = result(tmp_path, "biased", algo, {"name": "bias", "b": 1000.0, "malicious": [1]})
    assert model_columns(biased.rows) == model_columns(clean.rows)
    assert biased.rows[-1]["train/loss_mean"] > clean.rows[-1]["train/loss_mean"] + 100  # it did report


@pytest.mark.parametrize("algo", ["afl", "qfedavg"])
def test_bias_changes_loss_weighted_rules(tmp_path, algo):
    clean = result(tmp_path, "clean", algo)
    biased = result(tmp_path, "biased", algo, {"name": "bias", "b": 1000.0, "malicious": [1]})
    assert biased.rows[-1]["test/loss_mean"] != clean.rows[-1]["test/loss_mean"]


def test_update_scaling_does_not_change_fedmgda_plus_with_normalisation(tmp_path):
    clean = result(tmp_path, "clean", "fedmgda_plus")
    x4 = result(tmp_path, "x4", "fedmgda_plus", {"name": "update_scaling", "factor": 4.0, "malicious": [1]})
    assert model_columns(x4.rows) == model_columns(clean.rows)  # powers of 2 scale exactly
    x10 = result(tmp_path, "x10", "fedmgda_plus", {"name": "update_scaling", "factor": 10.0, "malicious": [1]})
    for a, b in zip(model_columns(x10.rows), model_columns(clean.rows)):
        assert a.keys() == b.keys()
        assert all(abs(a[k] - b[k]) <= 1e-5 * max(1.0, abs(b[k])) for k in a)  # float32 rounding
    plain = result(tmp_path, "fedavg", "fedavg", {"name": "update_scaling", "factor": 4.0, "malicious": [1]})
    assert plain.rows[-1]["test/loss_mean"] != result(tmp_path, "fa", "fedavg").rows[-1]["test/loss_mean"]


def test_loss_scaling_changes_fedavg_but_barely_normalised_fedmgda_plus(tmp_path):
    """One full-batch step: the attacker's update is exactly-ish c times the honest one."""
    att = {"name": "loss_scaling", "c": 8.0, "malicious": [1]}
    for algo, moved in (("fedavg", True), ("fedmgda_plus", False)):
        clean = result(tmp_path, f"{algo}_c", algo)
        scaled = result(tmp_path, f"{algo}_s", algo, att)
        gap = abs(scaled.rows[-1]["test/loss_mean"] - clean.rows[-1]["test/loss_mean"])
        assert (gap > 1e-3) if moved else (gap < 1e-5), (algo, gap)


ATTACK_CFGS = {
    "none": {"name": "none"},
    "bias": {"name": "bias", "b": 5.0},
    "loss_scaling": {"name": "loss_scaling", "c": 3.0},
    "update_scaling": {"name": "update_scaling", "factor": 3.0},
    "sign_flip": {"name": "sign_flip"},
    "gaussian": {"name": "gaussian", "norm": 1.0},
    "zero_update": {"name": "zero_update"},
    "model_replacement": {"name": "model_replacement"},
    "label_flip": {"name": "label_flip"},
}


def test_the_composition_grid_covers_every_attack():
    assert set(ATTACK_CFGS) == set(attacks.names())


@pytest.mark.parametrize("attack", sorted(ATTACK_CFGS))
@pytest.mark.parametrize("algo", algorithms.names())
def test_every_attack_composes_with_every_algorithm(tmp_path, algo, attack):
    cfg = dict(ATTACK_CFGS[attack])
    if attack != "none":
        cfg.update(malicious=[1, 4], always_participate=True)
    per_round = None if algo == "afl" else 5  # AFL needs full participation
    res = result(tmp_path, "run", algo, cfg, rounds=2, clients_per_round=per_round)
    assert res.status == "completed" and len(res.rows) == 2
    final = res.rows[-1]
    assert "benign/acc_mean" in final
    assert ("attackers/acc_mean" in final) == (attack != "none")


def test_always_participate_puts_the_attacker_in_every_cohort(tmp_path, monkeypatch):
    seen = []

    class Spy(Bias):     # bias, watched: declared under bias with its parent's knobs
        def apply(self, cohort, seed):
            seen.append(cohort.client_ids.tolist())
            return super().apply(cohort, seed)

    declare_impl(monkeypatch, "attack", "bias", Spy)
    spy = {"name": "bias", "malicious": [4], "always_participate": True}
    result(tmp_path, "forced", "fedavg", spy, rounds=8, clients_per_round=2)
    assert len(seen) == 8 and all(4 in ids and len(ids) == 2 for ids in seen)
    seen.clear()
    result(tmp_path, "sampled", "fedavg", {**spy, "always_participate": False}, rounds=8,
           clients_per_round=2)
    assert any(4 not in ids for ids in seen)


def test_benign_and_attacker_columns_match_the_per_client_accuracies(tmp_path):
    res = result(tmp_path, "r", "fedavg", {"name": "sign_flip", "malicious": [1, 4]})
    row = res.rows[-1]
    acc = [row[f"test/acc_client{k}"] for k in range(6)]
    assert row["benign/acc_mean"] == pytest.approx(sum(acc[k] for k in (0, 2, 3, 5)) / 4, rel=1e-12)
    assert row["attackers/acc_mean"] == pytest.approx((acc[1] + acc[4]) / 2, rel=1e-12)
    assert json.loads((tmp_path / "r" / "attack.json").read_text()) == {
        "name": "sign_flip", "attackers": [1, 4], "scale": 1.0, "malicious": [1, 4],
        "always_participate": False, "seed": 0}
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final"]["attackers/acc_mean"] == \
        row["attackers/acc_mean"]


def test_label_flip_gives_the_same_run_on_both_engines(tmp_path):
    att = {"name": "label_flip", "malicious": [0, 3], "permutation": "shift"}
    seq = result(tmp_path, "s", "fedavg", att, **{"client.batch_size": 10})
    bat = result(tmp_path, "b", "fedavg", att, engine="batched", **{"client.batch_size": 10})
    for a, b in zip(model_columns(seq.rows), model_columns(bat.rows)):
        assert all(abs(a[k] - b[k]) <= 1e-4 * max(1.0, abs(b[k])) for k in a)
    clean = result(tmp_path, "c", "fedavg", **{"client.batch_size": 10})
    assert seq.rows[-1]["test/loss_mean"] != clean.rows[-1]["test/loss_mean"]


@pytest.mark.slow
def test_bad_attack_config_is_a_one_line_cli_error(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    r = cli("run", "attack=bias", "attack.malicious=nobody", "rounds=1", "num_clients=4",
            "data.num_users=4", "clients_per_round=null", "progress=false")
    assert r.returncode == 2, r.stderr
    assert "attack.malicious='nobody' is not a client name" in r.stderr
    assert "Traceback" not in r.stderr


def test_non_finite_reported_losses_end_the_run_as_diverged_before_the_rule_reads_them(tmp_path,
                                                                                       monkeypatch):
    class Inf(Bias):
        def corrupt(self, cohort, rows, seed):
            return cohort.replace(loss_before=cohort.loss_before + rows * float("inf"))

    declare_impl(monkeypatch, "attack", "bias", Inf)
    with pytest.raises(DivergenceError, match="loss is not finite"):
        result(tmp_path, "afl", "afl", {"name": "bias", "malicious": [1]})
    assert json.loads((tmp_path / "afl" / "summary.json").read_text())["status"] == "diverged"
