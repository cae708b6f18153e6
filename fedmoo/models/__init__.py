"""The papers' networks. ``build(model_cfg, input_shape, num_classes)`` -> nn.Module.

Models are written so a batched engine can vectorise them over clients: no ``nn.LSTM``, no
BatchNorm running statistics in the paper models, no data-dependent Python control flow.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch
from torch import nn

from fedmoo import budget
from fedmoo.errors import UserError

# model slug -> "module:class"; the class takes input_shape, num_classes and the model config keys.
MODELS: dict[str, Any] = {
    "logreg": "fedmoo.models.linear:LogReg",
    "mlp": "fedmoo.models.linear:MLP",
    "cnn_cifar": "fedmoo.models.cnn:CNNCifar",
    "cnn_fmnist": "fedmoo.models.cnn:CNNFmnist",
    "cnn_femnist": "fedmoo.models.cnn:CNNFemnist",
    "cnn_mnist": "fedmoo.models.cnn:CNNMnist",
    "lstm_shakespeare": "fedmoo.models.lstm:LSTMShakespeare",
    "resnet18_gn": "fedmoo.models.resnet:ResNet18GN",
    "multi_lenet": "fedmoo.models.multitask:MultiLeNet",
    "mtl_mlp": "fedmoo.models.multitask:MTLMLP",
    "mtl_resnet18": "fedmoo.models.multitask:MTLResNet18",
}


def register(name: str, cls: type[nn.Module]) -> type[nn.Module]:
    """Add a model class (a plugin's): it takes ``input_shape``, ``num_classes`` and the model
    config's keys as keywords."""
    if name in MODELS:
        raise RuntimeError(f"model name {name!r} is registered twice")
    MODELS[name] = cls
    from fedmoo import plugins

    plugins.note_registered(cls.__module__)   # a package imported in Python counts as a plugin
    return cls


def names() -> list[str]:
    from fedmoo import plugins

    plugins.load_all()
    return sorted(MODELS)


def build(model_cfg: dict[str, Any], input_shape, num_classes: int,
          num_tasks: int | None = None) -> nn.Module:
    """``num_tasks``: S of multi-task data, 0 for single-task data, None = not known (a
    multi-task model then keeps its default number of heads)."""
    cfg = dict(model_cfg)
    name = cfg.pop("name", None)
    cfg.pop("description", None)
    if name not in MODELS:
        names()                               # a plugin's model registers on import
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; choose one of: {', '.join(names())}")
    cls = MODELS[name]
    if isinstance(cls, str):
        module, cls_name = cls.split(":")
        cls = getattr(importlib.import_module(module), cls_name)
    multitask = getattr(cls, "multitask", False)
    if num_tasks is not None and bool(num_tasks) != multitask:
        raise UserError(
            f"model={name} is {'multi' if multitask else 'single'}-task but the data has "
            f"{f'{num_tasks} tasks' if num_tasks else 'one task'}; use "
            + ("a single-task model (e.g. cnn_mnist, mlp)" if multitask else
               "a multi-task model: multi_lenet (images), mtl_mlp (vectors) or mtl_resnet18")
        )
    if num_tasks:
        cfg["num_tasks"] = int(num_tasks)
    valid = [p for p in inspect.signature(cls.__init__).parameters
             if p not in ("self", "input_shape", "num_classes", "num_tasks")]
    unknown = [k for k in cfg if k not in valid and k != "num_tasks"]
    if unknown:
        raise UserError(f"model.{unknown[0]} is not a setting of model={name}; valid keys: "
                        f"{', '.join(valid) or '(none)'}")
    shape = tuple(int(s) for s in input_shape)
    try:
        _check_memory(name, lambda: cls(shape, int(num_classes), **cfg))
        return cls(shape, int(num_classes), **cfg)
    except TypeError as e:
        raise UserError(f"model={name}: {e}") from None


def _check_memory(name: str, make) -> None:
    """Refuse a model whose parameters alone cannot fit in memory, before allocating them: the
    model is first made on PyTorch's ``meta`` device (shapes only) to count them."""
    if torch.empty(0).device.type == "meta":      # already shapes only (fedmoo.run.memory)
        return
    try:
        with torch.device("meta"):
            d = sum(p.numel() for p in make().parameters())
    except (ValueError, RuntimeError, IndexError, NotImplementedError):
        return                 # the real construction reports its own error
    budget.check(d * torch.get_default_dtype().itemsize, f"model={name} ({d:.3g} parameters)",
                 "choose a smaller model (fewer or narrower layers in model.*)")
