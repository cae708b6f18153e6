"""The partitions' declared hyperparameters (fedmoo.config.hparams.partition): the YAML options
start from them, bad values are refused from the section alone (no data, no torch), and a plugin's
partition declares its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedmoo.config import hparams
from fedmoo.cli.config import compose
from fedmoo.data import federate
from fedmoo.data.federated import Source
from fedmoo.errors import UserError
from fedmoo.config.hparams.partition import Partition
from fedmoo.run import identity
from tests.conftest import declare_impl

CONF = Path(__file__).resolve().parents[2] / "fedmoo" / "conf" / "partition"
OPTIONS = sorted(hparams.options("partition"))


def test_every_option_is_declared():
    assert OPTIONS == ["dirichlet", "femnist_skewed", "iid", "natural", "one_class_per_client",
                       "shards"]
    assert sorted(s for g, s in hparams.all_declared() if g == "partition") == OPTIONS


@pytest.mark.parametrize("name", OPTIONS)
def test_option_composes_to_its_declaration(name):
    section = compose([f"partition={name}"])["partition"]
    declared = {k.key.partition(".")[2]: k.default for k in hparams.knobs("partition", name)}
    assert section.pop("name") == name
    assert section == declared       # the YAML files change no default
    assert hparams.resolve("partition", name, section) == section
    assert not (CONF / f"{name}.yaml").exists()          # the declaration is the option


def test_declared_defaults():
    d = {k.key: k.default for k in hparams.knobs("partition", "dirichlet")}
    assert d["partition.beta"] == 0.5 and d["partition.min_size"] == 10
    assert d["partition.fractions"] == [0.8, 0.1, 0.1] and d["partition.split"] == "dataset"
    assert d["partition.compact_labels"] is False
    assert {k.key: k.default for k in hparams.knobs("partition", "one_class_per_client")}[
        "partition.compact_labels"] is True
    shards = {k.key: k.default for k in hparams.knobs("partition", "shards")}
    assert shards["partition.shards_per_client"] == 2 and shards["partition.num_shards"] is None


def test_a_setup_changes_only_what_it_sets():
    section = compose(["setup=fedfv_fmnist_one_class_per_client"])["partition"]
    assert section["classes"] == [0, 2, 6] and section["split"] == "pooled"
    assert section["order"] == ["train", "test", "val"] and section["compact_labels"] is True
    assert section["max_per_client"] is None and section["tasks"] == "all"


@pytest.mark.parametrize("name,given,needle", [
    ("dirichlet", {"beta": 0}, "partition.beta=0 must be a number in (0.0, inf)"),
    ("dirichlet", {"max_tries": 0}, "partition.max_tries=0 must be a positive integer"),
    ("iid", {"split": "pool"}, "partition.split='pool' must be dataset or pooled"),
    ("iid", {"pool": "test"}, "partition.pool='test' must be all or train"),
    ("iid", {"fractions": [0.5, 0.1, 0.1]}, "partition.fractions=[0.5, 0.1, 0.1] must be three "
                                            "non-negative numbers (train, val, test) summing to 1"),
    ("iid", {"fractions": [1.2, -0.1, -0.1]}, "partition.fractions=[1.2, -0.1, -0.1] must be "
                                              "three non-negative"),
    ("iid", {"fractions": "abc"}, "partition.fractions='abc' must be three non-negative"),
    ("iid", {"order": ["train", "test", "test"]}, "partition.order=['train', 'test', 'test'] "
                                                  "must list train, val and test once each"),
    ("iid", {"order": ["train", "tst", "val"]}, "partition.order=['train', 'tst', 'val'] must "
                                                "be a list of train, val and test, each once"),
    ("iid", {"max_per_client": 0}, "partition.max_per_client=0 must be a positive integer or "
                                   "null"),
    ("iid", {"seed": -1}, "partition.seed=-1 must be a non-negative integer below 2**63"),
    ("iid", {"tasks": [[0], [1]], "tasks_per_client": 1}, "partition.tasks and "
                                                          "partition.tasks_per_client are both"),
    ("iid", {"tasks": "some"}, "partition.tasks='some' must be all or one list of tasks"),
    ("natural", {"beta": 0.5}, "partition.beta is not a hyperparameter of partition=natural; "
                               "valid keys: seed, split, fractions, order, pool"),
    ("shards", {"shards_per_client": 0}, "partition.shards_per_client=0 must be a positive"),
    ("one_class_per_client", {"classes": 3}, "partition.classes=3 must be a list of class "
                                             "indices (non-negative integers) or null"),
    ("femnist_skewed", {"classes": 3}, "partition.classes=3 must be a list of class indices"),
    ("one_class_per_client", {"classes": [0, -2]}, "partition.classes=[0, -2] must be a list "
                                                   "of class indices"),
    ("femnist_skewed", {"classes_per_client": 11}, "partition.classes_per_client=11 must be "
                                                   "between 1 and the 10 classes"),
    ("femnist_skewed", {"classes": [3, 4], "classes_per_client": 3},
     "partition.classes_per_client=3 must be between 1 and the 2 classes"),
])
def test_bad_values_are_refused_from_the_section_alone(name, given, needle):
    with pytest.raises(UserError) as e:
        hparams.check("partition", {"name": name, **given})
    assert str(e.value).startswith(needle), str(e.value)
    assert str(e.value).endswith(f"(for partition={name})") or "not a hyperparameter" in needle


def _source(n=40):
    y = torch.arange(n) % 4
    return Source(x=torch.zeros(n, 1), y=y, is_test=torch.arange(n) >= 30, num_classes=4,
                  input_shape=(1,))             # samples 30..39: the test split


def test_federate_refuses_before_partitioning_and_fills_the_defaults():
    with pytest.raises(UserError, match=r"^partition.pool='test' must be all or train"):
        federate(_source(), {"name": "iid", "pool": "test"}, 2)   # split=dataset: pool unused
    fed = federate(_source(), {"name": "dirichlet", "beta": 1, "min_size": 2}, 4)  # int beta
    assert fed.train.sizes.sum() == 30 and fed.train.sizes.min() >= 2


def test_a_plugin_partition_declares_its_keys(monkeypatch):
    from dataclasses import dataclass

    from fedmoo.config.knobs import knob

    def halves(labels, num_clients, rng, *, reverse):
        parts = np.array_split(np.arange(len(labels)), num_clients)
        return parts[::-1] if reverse else parts

    @dataclass
    class Halves(Partition):
        reverse: bool = knob(False, "give the last half to client 0")

    declare_impl(monkeypatch, "partition", "test_halves", halves, Halves)
    fed = federate(_source(), {"name": "test_halves", "reverse": True}, 2)
    assert fed.train.of(0).tolist() == list(range(15, 30))
    with pytest.raises(UserError, match="^partition.reverse='yes' must be true or false"):
        federate(_source(), {"name": "test_halves", "reverse": "yes"}, 2)
    with pytest.raises(UserError, match=r"^unknown partition 'test_undeclared'; choose one of: "):
        federate(_source(), {"name": "test_undeclared"}, 2)


def test_a_checkpoint_from_before_the_declaration_compares_as_the_defaults():
    old = {"seed": 0, "tf32": False, "partition": {"name": "iid", "seed": 0}}
    new = {**old, "partition": {"name": "iid", "seed": 0, "tasks": "all",
                                "tasks_per_client": None, "max_per_client": None}}
    assert identity.config_diff(old, new) == ""
    capped = {**old, "partition": {**new["partition"], "max_per_client": 256}}
    assert identity.config_diff(old, capped) == "partition.max_per_client: None -> 256"


def test_old_results_get_the_declared_defaults():
    from fedmoo.report.defaults import default

    assert default("partition.beta", {"partition.name": "dirichlet"}) == 0.5
    assert default("partition.tasks", {"partition.name": "iid"}) == "all"
    assert default("partition.compact_labels", {"partition.name": "one_class_per_client"}) is True


@pytest.mark.parametrize("name", ["iid", "shards"])
def test_an_empty_test_split_is_named_as_such(name):
    """It was reported as the partitioner's "0 samples cannot fill 4 shards", as if training."""
    src = _source()
    src.is_test = torch.zeros(40, dtype=torch.bool)
    with pytest.raises(UserError, match=r"^the data has no test samples \(an empty test file\?\)"):
        federate(src, {"name": name}, 2)
