"""The papers' networks, each declared in ``fedmoo.config.hparams.model`` (a plugin's beside its
code). ``build(model_cfg, input_shape, num_classes)`` -> nn.Module. Models are written
so a batched engine can vectorise them over clients: no ``nn.LSTM``, no BatchNorm running
statistics, no data-dependent Python control flow."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from fedmoo import budget
from fedmoo.config import hparams as declarations
from fedmoo.errors import UserError


class Model(nn.Module):
    """A network whose ``model.*`` keys are declared in ``fedmoo.config.hparams.model`` under its slug
    ``name``: the constructor takes the data's shape and the hyperparameters as keywords, which
    ``Model.__init__`` checks and completes with the declared defaults (``self.hparams``)."""

    name: ClassVar[str] = ""
    multitask: ClassVar[bool] = False

    def __init__(self, hyperparameters: dict[str, Any]):
        super().__init__()
        self.hparams = declarations.resolve("model", self.name, hyperparameters)


def names() -> list[str]:
    return list(declarations.options("model"))


def build(model_cfg: dict[str, Any], input_shape, num_classes: int,
          num_tasks: int | None = None) -> nn.Module:
    """The network ``model_cfg`` names, with its declared keys (the defaults filled in) for
    inputs of ``input_shape``. ``num_tasks``: S of multi-task data, 0 for single-task data,
    None = not known (a multi-task network then has its ``paper_tasks`` heads)."""
    name = model_cfg.get("name")
    cls = declarations.component("model", name)   # (its slug, description and class: declared)
    multitask = getattr(cls, "multitask", False)
    if num_tasks is not None and bool(num_tasks) != multitask:
        raise UserError(
            f"model={name} is {'multi' if multitask else 'single'}-task but the data has "
            f"{f'{num_tasks} tasks' if num_tasks else 'one task'}; use "
            + ("a single-task model (e.g. cnn_mnist, mlp)" if multitask else
               "a multi-task model: multi_lenet (images), mtl_mlp (vectors) or mtl_resnet18")
        )
    given = {k: v for k, v in model_cfg.items() if k not in ("name", "description")}
    values = declarations.resolve("model", name, given)
    args: tuple = (tuple(int(s) for s in input_shape), int(num_classes))
    if multitask:
        args += (int(num_tasks) if num_tasks else cls.paper_tasks,)
    _check_memory(name, lambda: cls(*args, **values))
    return cls(*args, **values)


def _check_memory(name: str, make) -> None:
    """Refuse a model whose parameters alone cannot fit in memory, before allocating them: the
    model is first made on PyTorch's ``meta`` device (shapes only) to count them."""
    if torch.empty(0).device.type == "meta":      # already shapes only (fedmoo.run.setup)
        return
    try:
        with torch.device("meta"):
            d = sum(p.numel() for p in make().parameters())
    except (ValueError, RuntimeError, IndexError, NotImplementedError):
        return                 # the real construction reports its own error
    budget.check(d * torch.get_default_dtype().itemsize, f"model={name} ({d:.3g} parameters)",
                 "choose a smaller model (fewer or narrower layers in model.*)")
