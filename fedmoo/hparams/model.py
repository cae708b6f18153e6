"""The networks' hyperparameters (``model.*``): one dataclass per network of fedmoo.models.

Only what the config chooses is declared here. The input shape, the number of classes and, for a
multi-task network, the number of tasks (heads) come from the data: they are the constructor's
arguments, never ``model.*`` keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from fedmoo.hparams import declare
from fedmoo.knobs import knob

GROUP_NORM = 64   # GroupNorm's groups divide every layer's channels (64, 128, 256, 512)


def widths_problem(value: Any) -> str | None:
    """What is wrong with a list of hidden layer widths (``model.hidden``); None if nothing."""
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        return None
    return "must be a list of positive layer widths, e.g. [200,200] ([] = no hidden layer)"


def groups_problem(value: Any) -> str | None:
    """What is wrong with ``model.groups`` (GroupNorm's groups); None if nothing."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1 \
            and GROUP_NORM % value == 0:
        return None
    divisors = [d for d in range(1, GROUP_NORM + 1) if GROUP_NORM % d == 0]
    return (f"must divide the narrowest layer's {GROUP_NORM} channels: "
            f"{', '.join(map(str, divisors[:-1]))} or {divisors[-1]}")


def _groups() -> int:
    return knob(2, "GroupNorm groups per layer", test=groups_problem)


def _head_hidden(what: str = "one hidden ReLU layer of n units per head") -> Optional[int]:
    return knob(None, f"null = linear heads; n = {what}", lo=1)


@dataclass
class NoKnobs:
    pass


@dataclass
class LogReg:
    softmax_output: bool = knob(False, "return softmax probabilities (the FedFV code's double "
                                "softmax under cross-entropy)")


@dataclass
class MLP:
    hidden: Any = knob([200, 200], "hidden layer widths ([] = logistic regression)",
                       test=widths_problem)


@dataclass
class LSTM:
    embed_dim: int = knob(8, "embedding width", lo=1)
    hidden: int = knob(256, "LSTM units per layer", lo=1)
    layers: int = knob(2, "stacked LSTM layers", lo=1)


@dataclass
class ResNet:
    groups: int = _groups()


@dataclass
class MultiLeNet:
    width: int = knob(50, "trunk output width", lo=1)
    head_hidden: Optional[int] = _head_hidden("a hidden ReLU layer of n units per head (50: "
                                              "Sener & Koltun's heads)")


@dataclass
class MTLMLP:
    hidden: Any = knob([256, 128], "trunk layer widths", test=widths_problem)
    head_hidden: Optional[int] = _head_hidden()


@dataclass
class MTLResNet:
    groups: int = _groups()
    head_hidden: Optional[int] = _head_hidden()


declare("model", "logreg", LogReg)
declare("model", "mlp", MLP)
declare("model", "cnn_cifar", NoKnobs)
declare("model", "cnn_fmnist", NoKnobs)
declare("model", "cnn_femnist", NoKnobs)
declare("model", "cnn_mnist", NoKnobs)
declare("model", "lstm_shakespeare", LSTM)
declare("model", "resnet18_gn", ResNet)
declare("model", "multi_lenet", MultiLeNet)
declare("model", "mtl_mlp", MTLMLP)
declare("model", "mtl_resnet18", MTLResNet)
