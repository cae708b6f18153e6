"""Each attack's effect on a tiny hand-made cohort, attacker selection and the forced sampler."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedmoo import attacks

from fedmoo.config import hparams
from fedmoo.attacks.label_flip import label_permutation
from fedmoo.errors import UserError
from fedmoo.run.sampler import ClientSampler
from fedmoo.state import ClientSpec, Cohort

CONF = Path(attacks.__file__).parents[1] / "conf" / "attack"


def cohort() -> Cohort:
    """Clients 0, 1, 2 of a 4-client federation; client 1 is the attacker in every test."""
    return Cohort(
        client_ids=torch.tensor([0, 1, 2]),
        deltas=torch.tensor([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.0]], dtype=torch.float64),
        num_samples=torch.tensor([10.0, 30.0, 60.0], dtype=torch.float64),
        loss_before=torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64),
        loss_after=torch.tensor([0.4, 0.8, 1.5], dtype=torch.float64),
        acc_before=torch.tensor([50.0, 60.0, 70.0], dtype=torch.float64),
    )


def attack(name: str, **kw):
    return attacks.create({"name": name, "malicious": [1], **kw}).bind(4, num_classes=3)


def same(a, b) -> bool:
    return torch.equal(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64))


def test_every_attack_is_declared_with_a_description_and_no_yaml():
    assert not CONF.exists() or not list(CONF.glob("*.yaml"))
    assert all(len(text) > 10 for text in hparams.options("attack").values())


def test_bias_adds_b_to_the_reported_losses_only():
    c = attack("bias", b=5.0).apply(cohort(), seed=0)
    assert same(c.loss_before, [0.5, 6.0, 2.0]) and same(c.loss_after, [0.4, 5.8, 1.5])
    assert same(c.deltas, cohort().deltas) and same(c.acc_before, cohort().acc_before)


def test_loss_scaling_scales_objective_and_reports():
    a = attack("loss_scaling", c=3.0)
    spec = a.client_spec(ClientSpec(prox_mu=0.1), torch.tensor([0, 1, 2]))
    assert same(spec.loss_scale, [1.0, 3.0, 1.0]) and spec.prox_mu == 0.1
    spec2 = a.client_spec(ClientSpec(loss_scale=torch.tensor([2.0, 2.0, 2.0])), torch.tensor([0, 1, 2]))
    assert same(spec2.loss_scale, [2.0, 6.0, 2.0])                    # composes with an existing scale
    assert a.client_spec(ClientSpec(), torch.tensor([0, 2])).loss_scale is None  # no attacker sampled
    c = a.apply(cohort(), seed=0)
    assert same(c.loss_before, [0.5, 3.0, 2.0]) and same(c.loss_after, [0.4, 2.4000000000000004, 1.5])
    assert same(c.deltas, cohort().deltas)  # the update scales through training, not here


@pytest.mark.parametrize("name, kw, row", [
    ("update_scaling", {"factor": 10.0}, [30.0, 40.0]),
    ("sign_flip", {}, [-3.0, -4.0]),
    ("sign_flip", {"scale": 2.0}, [-6.0, -8.0]),
    ("zero_update", {}, [0.0, 0.0]),
    ("model_replacement", {"boost": 2.0}, [6.0, 8.0]),
    ("model_replacement", {}, [3.0 * 100 / 30, 4.0 * 100 / 30]),  # m = total / attacker samples
])
def test_update_attacks_change_only_the_attacker_row(name, kw, row):
    before = cohort()
    c = attack(name, **kw).apply(before, seed=0)
    assert torch.allclose(c.deltas[1], torch.tensor(row, dtype=torch.float64), rtol=1e-15)
    assert same(c.deltas[[0, 2]], before.deltas[[0, 2]])
    assert same(c.loss_before, before.loss_before)
    assert same(before.deltas, cohort().deltas)  # the input cohort is not modified


def test_model_replacement_lands_fedavg_on_the_attacker_model():
    """FedAvg (sample weights) with honest updates 0: w_new = w - m n_a/n g_a = w - g_a."""
    c = cohort()
    c = c.replace(deltas=torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 0.0]], dtype=torch.float64))
    out = attack("model_replacement").apply(c, seed=0)
    p = c.num_samples / c.num_samples.sum()
    assert torch.allclose(p @ out.deltas, torch.tensor([3.0, 4.0], dtype=torch.float64), rtol=1e-15)


def test_gaussian_has_the_given_norm_and_is_seeded_per_round():
    a = attack("gaussian", norm=2.0)
    c1, c2, c3 = a.apply(cohort(), seed=11), a.apply(cohort(), seed=11), a.apply(cohort(), seed=12)
    assert abs(float(c1.deltas[1].norm()) - 2.0) < 1e-12
    assert same(c1.deltas, c2.deltas) and not same(c1.deltas[1], c3.deltas[1])
    assert same(c1.deltas[[0, 2]], cohort().deltas[[0, 2]])
    honest = attack("gaussian").apply(cohort(), seed=11)  # norm null: the honest norm ||(3,4)|| = 5
    assert abs(float(honest.deltas[1].norm()) - 5.0) < 1e-12
    assert not same(honest.deltas[1], cohort().deltas[1])
    other_seed = attack("gaussian", norm=2.0, seed=1).apply(cohort(), seed=11)
    assert not same(other_seed.deltas[1], c1.deltas[1])


def test_gaussian_works_on_multi_task_deltas():
    c = cohort()
    c = c.replace(deltas=torch.ones(3, 2, 5, dtype=torch.float64))
    out = attack("gaussian", norm=3.0).apply(c, seed=0)
    assert out.deltas.shape == (3, 2, 5) and abs(float(out.deltas[1].norm()) - 3.0) < 1e-12


def test_label_flip_builds_a_label_map_for_attacker_rows():
    a = attack("label_flip")
    spec = a.client_spec(ClientSpec(), torch.tensor([2, 1, 0]))
    assert spec.label_map.tolist() == [[0, 1, 2], [2, 1, 0], [0, 1, 2]]
    assert a.client_spec(ClientSpec(), torch.tensor([0, 3])).label_map is None
    assert same(a.apply(cohort(), seed=0).deltas, cohort().deltas)
    shifted = attack("label_flip", permutation="shift").client_spec(ClientSpec(), torch.tensor([1]))
    assert shifted.label_map.tolist() == [[1, 2, 0]]


def test_label_permutations():
    assert label_permutation("reverse", 4, 0).tolist() == [3, 2, 1, 0]
    assert label_permutation("shift", 4, 0).tolist() == [1, 2, 3, 0]
    assert label_permutation([1, 0, 2], 3, 0).tolist() == [1, 0, 2]
    r = label_permutation("random", 10, 5)
    assert sorted(r.tolist()) == list(range(10)) and r.tolist() == label_permutation("random", 10, 5).tolist()
    with pytest.raises(UserError, match="attack.permutation"):
        label_permutation([0, 0, 1], 3, 0)
    for bad in ("sideways", [0, 0, 1], [1, 2], [True, False], 3):   # refused by the declaration
        with pytest.raises(UserError, match=r"attack.permutation=.* is not valid"):
            attacks.create({"name": "label_flip", "permutation": bad})
    two = attacks.create({"name": "label_flip", "permutation": [1, 0], "malicious": [0]})
    with pytest.raises(UserError, match=r"permutation of 0..2 \(3 classes\)"):
        two.bind(4, num_classes=3)                                   # the data has 3 classes
    with pytest.raises(UserError, match="classification"):
        attacks.create({"name": "label_flip"}).bind(4, num_classes=None)


def test_no_attacker_in_the_cohort_leaves_it_untouched():
    c = cohort()
    a = attacks.create({"name": "sign_flip", "malicious": [3]}).bind(4)
    assert a.apply(c, seed=0) is c


# -- who is malicious -------------------------------------------------------------------------
def test_malicious_by_ids_fraction_and_name():
    assert attacks.create({"name": "bias", "malicious": [3, 1]}).bind(5).attackers.tolist() == [1, 3]
    assert attacks.create({"name": "bias", "malicious": 2}).bind(5).attackers.tolist() == [2]
    frac = [attacks.create({"name": "bias", "malicious": 0.25, "seed": s}).bind(8).attackers.tolist()
            for s in range(6)]
    assert all(len(f) == 2 and f == sorted(f) for f in frac)
    assert frac[0] == attacks.create({"name": "bias", "malicious": 0.25, "seed": 0}).bind(8).attackers.tolist()
    assert len({tuple(f) for f in frac}) > 1                    # the seed changes who attacks
    assert attacks.create({"name": "bias", "malicious": 0.01}).bind(8).attackers.numel() == 1
    assert attacks.create({"name": "bias", "malicious": 1.0}).bind(3).attackers.tolist() == [0, 1, 2]
    named = attacks.create({"name": "bias", "malicious": "phd"}).bind(2, ["phd", "non-phd"])
    assert named.attackers.tolist() == [0]
    assert named.mask.tolist() == [True, False]
    assert set(named.groups()) == {"benign", "attackers"}
    assert named.groups()["benign"].tolist() == [False, True]


@pytest.mark.parametrize("value, names, match", [
    ([0, 7], None, "client ids run from 0 to 4"),
    ("phd", None, "have no names"),
    ("nobody", ["phd", "non-phd"], "choose among: phd, non-phd"),
])
def test_malicious_values_the_federation_refuses_are_user_errors(value, names, match):
    a = attacks.create({"name": "bias", "malicious": value})   # allowed until it meets the data
    with pytest.raises(UserError, match=match):
        a.bind(5, names)


@pytest.mark.parametrize("value, match", [
    ([1, 1], "twice"),
    (1.5, r"\(0, 1\]"),
    (0.0, r"\(0, 1\]"),
    (-2, "ids run from 0"),
    ([3, -1], "contains client -1"),
    ([], "not valid"),
    (True, "not valid"),
    ([0, "phd"], "not valid"),
    (None, "not valid"),
])
def test_malicious_values_no_federation_takes_are_refused_when_the_attack_is_made(value, match):
    with pytest.raises(UserError, match=match):
        attacks.create({"name": "bias", "malicious": value})


def test_unknown_keys_and_values_are_user_errors():
    with pytest.raises(UserError, match="attack.c is not a hyperparameter of attack=bias"):
        attacks.create({"name": "bias", "c": 2})
    with pytest.raises(UserError, match="unknown attack"):
        attacks.create({"name": "poison"})
    with pytest.raises(UserError, match="attack.c=0"):
        attacks.create({"name": "loss_scaling", "c": 0})
    with pytest.raises(UserError, match="attack.always_participate"):
        attacks.create({"name": "bias", "always_participate": "yes"})


def test_none_reports_benign_over_everyone_or_over_would_be_attackers():
    plain = attacks.create({"name": "none"}).bind(3)
    assert plain.attackers.numel() == 0 and list(plain.groups()) == ["benign"]
    assert plain.groups()["benign"].all()
    marked = attacks.create({"name": "none", "malicious": [2]}).bind(3)
    assert marked.groups()["attackers"].tolist() == [False, False, True]
    c = cohort()
    assert marked.apply(c, seed=0) is c


# -- forced participation ---------------------------------------------------------------------
def test_sampler_puts_forced_clients_in_every_round():
    s = ClientSampler(10, 4, seed=3, forced=torch.tensor([2, 5]))
    rounds = [s.sample(t).tolist() for t in range(20)]
    assert all(len(r) == 4 and {2, 5} <= set(r) and r == sorted(r) for r in rounds)
    assert rounds == [ClientSampler(10, 4, seed=3, forced=[2, 5]).sample(t).tolist() for t in range(20)]
    assert len({tuple(r) for r in rounds}) > 1  # the other places are still random


def test_sampler_without_forced_clients_is_unchanged():
    s = ClientSampler(10, 4, seed=3, forced=torch.zeros(0, dtype=torch.long))
    for t in range(5):
        rng = np.random.default_rng([3, t, 7])
        assert s.sample(t).tolist() == sorted(rng.choice(10, 4, replace=False).tolist())


def test_too_many_forced_clients_is_a_user_error():
    with pytest.raises(UserError, match="clients_per_round=2"):
        ClientSampler(10, 2, seed=0, forced=[1, 2, 3])
    a = attacks.create({"name": "bias", "malicious": [1, 2], "always_participate": True}).bind(5)
    assert a.forced_clients.tolist() == [1, 2]
    assert attacks.create({"name": "bias", "malicious": [1, 2]}).bind(5).forced_clients.numel() == 0
