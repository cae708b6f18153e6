"""fedmoo.config.hparams: what a declaration may be (the mistakes of a plugin's author stop at
import)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fedmoo.config import hparams
from fedmoo.config.hparams.partition import Partition
from fedmoo.config.knobs import knob


@dataclass
class Halves:
    parts: int = knob(2, "pieces", lo=1)


@pytest.fixture
def undeclare():
    added = []
    yield added
    for key in added:
        hparams._DECLARED.pop(key, None)


def test_a_partition_or_attack_must_extend_the_keys_every_one_has(undeclare):
    with pytest.raises(TypeError, match="does not extend fedmoo.config.hparams.partition.Partition"):
        hparams.declare("partition", "halves", Halves, dict)
    with pytest.raises(TypeError, match="does not extend fedmoo.config.hparams.attack.Common"):
        hparams.declare("attack", "halves", Halves, dict)

    @dataclass
    class HalvesPartition(Partition):
        parts: int = knob(2, "pieces", lo=1)

    undeclare.append(("partition", "halves"))
    found = hparams.declare("partition", "halves", HalvesPartition, dict)
    assert found.node()["parts"] == 2 and found.node()["split"] == "dataset"


def test_a_preset_default_must_be_a_value_its_knob_allows(undeclare):
    with pytest.raises(ValueError, match=r"algo 'halves': default algo.parts=0 must be a positive"):
        hparams.declare("algo", "halves", Halves, dict, parts=0)
    assert ("algo", "halves") not in hparams._DECLARED
    undeclare.append(("algo", "halves3"))
    assert hparams.declare("algo", "halves3", Halves, dict, parts=3).node() == {"name": "halves3",
                                                                           "parts": 3}


def test_declares_makes_the_class_a_dataclass_once_per_stack(undeclare):
    undeclare += [("algo", "thirds"), ("algo", "fifths"), ("algo", "halves_more")]

    @hparams.declares("algo", "fifths", dict, "Fifths", parts=5)
    @hparams.declares("algo", "thirds", dict, "Thirds", parts=3)
    class Thirds:
        parts: int = knob(2, "pieces", lo=1)

    @hparams.declares("algo", "halves_more", dict)
    class More(Thirds):                   # a subclass's own knob becomes a field too
        extra: bool = knob(False, "more")

    assert Thirds(parts=4).parts == 4 and Thirds().parts == 2
    assert hparams.declared("algo", "thirds").node() == {"name": "thirds", "parts": 3}
    assert hparams.declared("algo", "fifths").node() == {"name": "fifths", "parts": 5}
    assert hparams.declared("algo", "fifths").params is Thirds
    assert hparams.declared("algo", "halves_more").node() == {"name": "halves_more", "parts": 2,
                                                              "extra": False}


def test_resolved_list_defaults_are_the_callers_own():
    first = hparams.resolve("partition", "iid", {})
    first["fractions"].append(0.5)
    assert hparams.resolve("partition", "iid", {})["fractions"] == [0.8, 0.1, 0.1]
