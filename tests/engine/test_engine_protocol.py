"""fedmoo.engine.base: both engines implement the Engine protocol the runner types against, and
the client's SGD settings are one record built from the config's ``client`` section."""

from __future__ import annotations

import ast
import dataclasses
import re
import inspect
from pathlib import Path

import pytest
import torch

import fedmoo.engine.base as base
from fedmoo import engine as fengine
from fedmoo.engine.base import Engine, LocalSGD, Member, StackingEngine
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.sequential import SequentialEngine
from fedmoo.errors import UserError
from fedmoo.models.linear import MLP
from fedmoo.state import ClientSpec
from tests.engine.helpers import federation

SGD = LocalSGD(lr=0.1, batch_size=2)


def _methods(proto) -> list[str]:
    """The methods a protocol declares (its own and its bases'), its properties excluded."""
    out = []
    for cls in proto.__mro__:
        if cls in (Engine, StackingEngine):
            out += [n for n, v in vars(cls).items()
                    if inspect.isfunction(v) and not n.startswith("_")]
    return out


@pytest.mark.parametrize("cls,proto", [(SequentialEngine, Engine), (BatchedEngine, StackingEngine)])
def test_each_engine_has_the_protocols_methods_with_their_signatures(cls, proto):
    names = _methods(proto)
    assert "train" in names and ("train_many" in names) == (proto is StackingEngine)
    for name in names:
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(proto, name)), \
            f"{cls.__name__}.{name}"


def test_each_engine_satisfies_the_protocol_at_runtime():
    data = federation([4, 4], (3,), 2)
    seq = SequentialEngine(MLP((3,), 2), data, SGD)
    bat = BatchedEngine(MLP((3,), 2), data, SGD)
    assert isinstance(seq, Engine) and not isinstance(seq, StackingEngine)
    assert isinstance(bat, Engine) and isinstance(bat, StackingEngine)
    assert seq.sgd is SGD and bat.sgd is SGD and seq.choice is None and bat.choice is None
    auto = fengine.build("auto", MLP((3,), 2), data, SGD)     # a CPU: batched, with its reason
    assert isinstance(auto, Engine) and auto.choice.startswith("auto: on a CPU")


def test_one_member_through_train_many_is_train():
    data = federation([4, 3, 5], (3,), 2)
    torch.manual_seed(0)
    bat = BatchedEngine(MLP((3,), 2).double(), data, LocalSGD(lr=0.1, batch_size=2, epochs=2))
    w, ids = torch.randn(sum(p.numel() for p in bat.model.parameters()), dtype=torch.float64), \
        torch.tensor([2, 0])
    alone = bat.train(ids, w, ClientSpec(), 3)
    (many,) = bat.train_many([Member(bat, ids, w, ClientSpec(), 3)])
    assert torch.equal(alone.deltas, many.deltas) and many.local_lr == 0.1


def test_the_protocol_module_imports_no_engine():
    """Naming the interface must not build or import an engine (nor torch at run time)."""
    tree = ast.parse(Path(base.__file__).read_text())
    found = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    found |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in found if m.startswith(("fedmoo", "torch"))} == \
        {"fedmoo.config.schema", "fedmoo.state", "torch"}   # the last two for type hints only;
    # fedmoo.config.schema (torch-free) for the client knobs' declared defaults and checks
    assert "TYPE_CHECKING" in Path(base.__file__).read_text()


def test_local_sgd_from_the_client_section():
    sgd = LocalSGD.from_config({"lr": 1, "batch_size": 10, "epochs": 2, "local_steps": None,
                                "momentum": 0, "weight_decay": 0.001, "description": "help"})
    assert sgd == LocalSGD(lr=1.0, batch_size=10, epochs=2, local_steps=None, momentum=0.0,
                           weight_decay=0.001)
    assert type(sgd.lr) is float and type(sgd.momentum) is float and sgd.local_steps is None
    assert LocalSGD.from_config({"lr": 0.5, "batch_size": None}) == \
        LocalSGD(0.5, None, 1, None, 0.0, 0.0)                  # plain SGD: one epoch
    with pytest.raises(dataclasses.FrozenInstanceError):
        sgd.lr = 0.2   # type: ignore[misc]


@pytest.mark.parametrize("client,message", [
    ({"lr": 0.1, "batch_size": 4, "nesterov": True},
     "client.nesterov is not a setting of client; remove it (its settings: batch_size, epochs, "
     "local_steps, lr, momentum, weight_decay)"),
    ({"lr": 0.0}, "client.lr=0.0 must be a number in (0.0, inf)"),
    ({"batch_size": 0}, "client.batch_size=0 must be a positive integer or null"),
])
def test_local_sgd_refuses_what_the_schema_refuses(client, message):
    with pytest.raises(UserError, match=f"^{re.escape(message)}"):
        LocalSGD.from_config(client)
    assert LocalSGD.from_config({"batch_size": 4}) == LocalSGD(0.01, 4)   # declared defaults
