"""Every option of every config group (a declaration or a YAML file) composes, and what it names
can be instantiated."""

from __future__ import annotations

import pytest

from fedmoo import algorithms, attacks, models

from fedmoo.config import hparams
from fedmoo.cli.config import compose
from fedmoo.cli.groups import group_options


def _options(group):
    return sorted(group_options(group))


@pytest.mark.parametrize("name", _options("algo"))
def test_algo_yaml_instantiates(name):
    cfg = compose([f"algo={name}"])
    algo = algorithms.build(cfg["algo"])
    assert algo.name == name == cfg["algo"]["name"]   # one slug everywhere


@pytest.mark.parametrize("name", _options("model"))
def test_model_yaml_instantiates(name):
    cfg = compose([f"model={name}", "data=cifar10"])   # an image dataset fits every model
    data = cfg["data"]
    models.build(cfg["model"], data["input_shape"], data["num_classes"])


@pytest.mark.parametrize("name", _options("data"))
def test_data_yaml_composes(name):
    cfg = compose([f"data={name}"])
    assert cfg["data"]["name"] in hparams.options("data")
    assert "input_shape" in cfg["data"] and "num_classes" in cfg["data"]


@pytest.mark.parametrize("name", _options("partition"))
def test_partition_yaml_composes(name):
    cfg = compose([f"partition={name}"])
    assert cfg["partition"]["name"] == name
    assert name == "natural" or callable(hparams.component("partition", name))


@pytest.mark.parametrize("name", _options("attack"))
def test_attack_yaml_instantiates(name):
    cfg = compose([f"attack={name}"])
    attack = attacks.create(cfg["attack"]).bind(cfg["num_clients"], num_classes=10)
    assert attack.name == name == cfg["attack"]["name"]


@pytest.mark.parametrize("group,name", [(g, n) for g in ("experiment", "setup", "debug")
                                        for n in _options(g)])
def test_global_presets_compose(group, name):
    compose([f"{group}={name}"])


def test_every_option_has_a_description():
    for group in ("algo", "data", "partition", "setup", "model", "client", "attack", "experiment",
                  "debug"):
        for name, text in group_options(group).items():
            assert text, f"{group}={name} has no description"
            # the command that runs an experiment is not its description
            assert "fedmoo run" not in text, f"{group}={name}: {text}"


def test_a_description_is_never_cut_mid_sentence(tmp_path):
    from fedmoo.cli.groups import describe_yaml

    f = tmp_path / "x.yaml"
    f.write_text("# @package _global_\n# fedmoo run -m experiment=x\n# Pooled Adult: each domain's "
                 "data and\n# test records pooled\n# Client 0 is phd\nrounds: 1\n")
    assert describe_yaml(f) == "Pooled Adult: each domain's data and test records pooled"
    f.write_text("# fedmoo run -m experiment=x\nrounds: 1\n")
    assert describe_yaml(f) == "fedmoo run -m experiment=x"
