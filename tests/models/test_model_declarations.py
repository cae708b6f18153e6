"""The networks' hyperparameters are declared once (fedmoo.config.hparams.model): each model YAML
starts from its declaration, the network built from the composed section has those values, and the data
(not the config) gives the shape, the classes and the number of tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedmoo import models

from fedmoo.config import hparams, schema
from fedmoo.cli.config import compose
from fedmoo.errors import UserError
from fedmoo.config.hparams.model import groups_problem, widths_problem
from fedmoo.models import Model
from fedmoo.params import num_params

CONF = Path(models.__file__).parents[1] / "conf" / "model"
SHAPE = {"lstm_shakespeare": (80,), "logreg": (60,), "mlp": (60,), "mtl_mlp": (60,)}


def test_every_model_is_declared_and_needs_no_yaml():
    declared = {slug for group, slug in hparams.all_declared() if group == "model"}
    assert declared == set(models.names()) and not list(CONF.glob("*.yaml"))


@pytest.mark.parametrize("name", models.names())
def test_the_option_is_the_declaration(name):
    section = compose([f"model={name}"])["model"]
    declared = {k.key.partition(".")[2]: k.default for k in hparams.knobs("model", name)}
    assert section == {"name": name, **declared}
    net = models.build(section, SHAPE.get(name, (3, 32, 32)), 10)
    assert isinstance(net, Model) and net.name == name
    assert net.hparams == declared


def test_the_declared_values_shape_the_network():
    mlp = models.build(compose(["model=mlp", "model.hidden=[7]"])["model"], (5,), 3)
    assert mlp.hparams == {"hidden": [7]} and num_params(mlp) == 5 * 7 + 7 + 7 * 3 + 3
    assert num_params(models.build({"name": "mlp", "hidden": []}, (5,), 3)) == 5 * 3 + 3
    lstm = models.build({"name": "lstm_shakespeare", "hidden": 4, "layers": 1}, (10,), 6)
    assert lstm.hparams == {"embed_dim": 8, "hidden": 4, "layers": 1}
    assert num_params(lstm) == 6 * 8 + 4 * 4 * (8 + 4 + 1) + 4 * 6 + 6
    heads = models.build({"name": "mtl_mlp", "hidden": [4], "head_hidden": 2}, (5,), 3, 2)
    assert num_params(heads) == (5 * 4 + 4) + 2 * ((4 * 2 + 2) + (2 * 3 + 3))


def test_the_data_gives_the_number_of_tasks():
    assert len(models.build({"name": "mtl_mlp"}, (5,), 1, 3).heads) == 3
    # not known (describe --model-only): the paper data's tasks
    assert [len(models.build({"name": n}, (1, 28, 28), 2).heads)
            for n in ("multi_lenet", "mtl_mlp", "mtl_resnet18")] == [2, 8, 40]
    with pytest.raises(UserError, match=r"^model.num_tasks is not a hyperparameter of "
                                        r"model=multi_lenet; valid keys: width, head_hidden$"):
        models.build({"name": "multi_lenet", "num_tasks": 3}, (1, 28, 28), 10, 2)


@pytest.mark.parametrize("cfg, needle", [
    ({"name": "mlp", "hidden": [0]}, "model.hidden=[0] must be a list of positive layer widths"),
    ({"name": "mlp", "hidden": 200}, "model.hidden=200 must be a list"),
    ({"name": "resnet18_gn", "groups": 3}, "model.groups=3 must divide the narrowest layer's 64 "
                                           "channels: 1, 2, 4, 8, 16, 32 or 64"),
    ({"name": "lstm_shakespeare", "layers": 0}, "model.layers=0 must be a positive integer"),
    ({"name": "logreg", "softmax_output": "yes"}, "model.softmax_output='yes' must be true or"),
    ({"name": "cnn_cifar", "width": 3}, "model.width is not a hyperparameter of model=cnn_cifar; "
                                        "valid keys: (none)"),
])
def test_bad_values_are_refused_before_the_network_is_made(cfg, needle):
    with pytest.raises(UserError) as e:
        models.build(cfg, (3, 32, 32), 10)
    assert str(e.value).startswith(needle)


def test_the_torch_free_checks():
    assert [widths_problem(v) for v in ([], [3], (4, 5))] == [None] * 3
    assert all(widths_problem(v) for v in ([0], [True], ["a"], 3, None))
    assert [groups_problem(g) for g in (1, 2, 32, 64)] == [None] * 4
    assert all(groups_problem(g) for g in (0, 3, 128, True, 2.0, "2"))


def test_a_class_made_from_python_gets_the_declared_defaults():
    from fedmoo.models.linear import MLP

    assert MLP((4,), 2).hparams == {"hidden": [200, 200]}
    with pytest.raises(UserError, match="model.hidden="):
        MLP((4,), 2, hidden=[-1])


def test_a_value_of_the_wrong_type_is_refused_by_the_check():
    cfg = compose(["model=resnet18_gn", "model.groups=abc"])   # Hydra keeps the text
    with pytest.raises(UserError, match=r"^model.groups='abc' must divide the narrowest layer's "
                                        r"64 channels"):
        schema.check(cfg)
    with pytest.raises(UserError, match=r"^model.softmax_output='maybe' must be true or false"):
        schema.check(compose(["model=logreg", "model.softmax_output=maybe"]))
