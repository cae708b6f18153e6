"""What every network of fedmoo.models shares: its slug and its declared hyperparameters."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from fedmoo.config import hparams as declarations


class Model(nn.Module):
    """A network whose ``model.*`` keys are declared in ``fedmoo.config.hparams.model`` under its
    slug ``name``. The constructor takes the data's shape (``input_shape``, ``num_classes`` and, for
    a multi-task network, ``num_tasks``) and the hyperparameters as keywords; ``Model.__init__``
    checks them against the declaration and fills in the declared defaults: ``self.hparams``.
    """

    name: ClassVar[str] = ""
    multitask: ClassVar[bool] = False

    def __init__(self, hyperparameters: dict[str, Any]):
        super().__init__()
        self.hparams = declarations.resolve("model", self.name, hyperparameters)
