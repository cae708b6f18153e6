"""The attacks' hyperparameters are declared once (fedmoo.config.hparams.attack): the YAML of each
option starts from its declaration, the attack built from it reports the same values, and the
torch-free checks of the keys that take values of several kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedmoo import attacks

from fedmoo.config import hparams
from fedmoo.attacks.base import Attack
from fedmoo.cli.config import compose
from fedmoo.errors import UserError
from fedmoo.config.hparams.attack import COMMON, malicious_problem, permutation_problem

CONF = Path(attacks.__file__).parents[1] / "conf" / "attack"
OWN = {"none": [], "bias": ["b"], "loss_scaling": ["c"], "update_scaling": ["factor"],
       "sign_flip": ["scale"], "gaussian": ["norm"], "zero_update": [],
       "model_replacement": ["boost"], "label_flip": ["permutation"]}


def test_every_attack_is_declared():
    assert {slug for group, slug in hparams.all_declared() if group == "attack"} == \
        set(attacks.names()) == set(OWN)
    assert COMMON == ("malicious", "always_participate", "seed")


@pytest.mark.parametrize("name", sorted(OWN))
def test_the_option_is_the_declaration(name):
    cls = attacks.get(name)
    assert "__init__" not in vars(cls), "no constructor of its own: defaults are declared"
    assert not (CONF / f"{name}.yaml").exists()
    section = compose([f"attack={name}"])["attack"]
    declared = {k.key.partition(".")[2]: k.default for k in hparams.knobs("attack", name)}
    assert section == {"name": name, **declared}
    built = attacks.create(section)
    assert list(built.hparams()) == [*OWN[name], *COMMON]            # its own keys first
    assert built.hparams() == {k: v for k, v in section.items() if k != "name"}


def test_the_defaults_that_differ_between_attacks():
    assert compose(["attack=none"])["attack"]["malicious"] is None      # nobody
    assert compose(["attack=bias"])["attack"] == {"name": "bias", "malicious": 0.1, "b": 10.0,
                                                  "always_participate": False, "seed": 0}
    made = attacks.create({"name": "sign_flip", "scale": 2, "malicious": [1]})
    assert made.hp.scale == 2.0 and isinstance(made.hp.scale, float) and made.hp.seed == 0


@pytest.mark.parametrize("value", [0.2, 1.0, 0, 3, [0, 3], (2, 1), "phd", ["phd", "non-phd"]])
def test_malicious_kinds_allowed(value):
    assert malicious_problem(value) is None


@pytest.mark.parametrize("value, reason", [
    (1.5, "as a fraction must be in (0, 1]"),
    (0.0, "as a fraction must be in (0, 1]"),
    (float("nan"), "as a fraction must be in (0, 1]"),
    (-1, "is not a client id: ids run from 0"),
    ([2, -1], "contains client -1, but client ids run from 0"),
    ([2, 2], "lists a client twice"),
    ([], "is not valid"),
    (None, "is not valid"),
    (True, "is not valid"),
    ([1, "phd"], "is not valid"),
    ({"a": 1}, "is not valid"),
])
def test_malicious_values_refused_without_the_data(value, reason):
    assert malicious_problem(value).startswith(reason)


def test_permutation_kinds():
    assert [permutation_problem(v) for v in ("reverse", "shift", "random", [1, 0, 2], [0])] == \
        [None] * 5
    for bad in ("sideways", [0, 0, 1], [1, 2], [], [True, False], 2, None):
        assert permutation_problem(bad).startswith("is not valid"), bad


def test_an_attack_without_a_declaration_is_refused_in_one_line():
    class Rogue(Attack):
        name = "rogue_undeclared"

    with pytest.raises(UserError, match=r"^attack=rogue_undeclared declares no hyperparameters "
                                        r"\(malicious, \.\.\.\): its package must declare them"):
        Rogue()
