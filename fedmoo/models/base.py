"""What every network of fedmoo.models shares: its slug and its declared hyperparameters."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from fedmoo.config import hparams as declarations


class Model(nn.Module):
    """A network whose ``model.*`` keys are declared in ``fedmoo.config.hparams.model`` under its slug
    ``name``: the constructor takes the data's shape and the hyperparameters as keywords, which
    ``Model.__init__`` checks and completes with the declared defaults (``self.hparams``)."""

    name: ClassVar[str] = ""
    multitask: ClassVar[bool] = False

    def __init__(self, hyperparameters: dict[str, Any]):
        super().__init__()
        self.hparams = declarations.resolve("model", self.name, hyperparameters)
