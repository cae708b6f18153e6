"""The networks' hyperparameters (``model.*``): one dataclass per network of fedmoo.models.

Only what the config chooses is declared here. The input shape, the number of classes and, for a
multi-task network, the number of tasks (heads) come from the data: they are the constructor's
arguments, never ``model.*`` keys."""

from __future__ import annotations

from typing import Any, Optional

from fedmoo.config.hparams import NoKnobs, declare, declares
from fedmoo.config.knobs import integer, knob

GROUP_NORM = 64   # GroupNorm's groups divide every layer's channels (64, 128, 256, 512)


def widths_problem(value: Any) -> str | None:
    """What is wrong with a list of hidden layer widths (``model.hidden``); None if nothing."""
    if isinstance(value, (list, tuple)) and all(integer(v) and v >= 1 for v in value):
        return None
    return "must be a list of positive layer widths, e.g. [200,200] ([] = no hidden layer)"


def groups_problem(value: Any) -> str | None:
    """What is wrong with ``model.groups`` (GroupNorm's groups); None if nothing."""
    if integer(value) and value >= 1 and GROUP_NORM % value == 0:
        return None
    divisors = [d for d in range(1, GROUP_NORM + 1) if GROUP_NORM % d == 0]
    return (f"must divide the narrowest layer's {GROUP_NORM} channels: "
            f"{', '.join(map(str, divisors[:-1]))} or {divisors[-1]}")


def _head_hidden(what: str = "one hidden ReLU layer of n units per head") -> Optional[int]:
    return knob(None, f"null = linear heads; n = {what}", lo=1)


@declares("model", "logreg", "fedmoo.models.linear:LogReg",
          "Multinomial logistic regression (softmax_output=true reproduces the FedFV code's "
          "double softmax)")
class LogReg:
    softmax_output: bool = knob(False, "return softmax probabilities (the FedFV code's double "
                                "softmax under cross-entropy)")


@declares("model", "mlp", "fedmoo.models.linear:MLP",
          "Fully connected ReLU network (FedFV/AdaFed CIFAR-10: 3072-200-200-10)")
class MLP:
    hidden: Any = knob([200, 200], "hidden layer widths ([] = logistic regression)",
                       test=widths_problem)


@declares("model", "lstm_shakespeare", "fedmoo.models.lstm:LSTMShakespeare",
          "Character LSTM (embedding 8, 2 x LSTM 256, dense vocab) with a hand-written, "
          "vmap-friendly cell")
class LSTM:
    embed_dim: int = knob(8, "embedding width", lo=1)
    hidden: int = knob(256, "LSTM units per layer", lo=1)
    layers: int = knob(2, "stacked LSTM layers", lo=1)


@declares("model", "resnet18_gn", "fedmoo.models.resnet:ResNet18GN",
          "ResNet-18 with GroupNorm (AdaFed: CIFAR-10 setup 2, CIFAR-100, CINIC-10, "
          "Tiny-ImageNet)")
class ResNet:
    groups: int = knob(2, "GroupNorm groups per layer", test=groups_problem)


@declares("model", "multi_lenet", "fedmoo.models.multitask:MultiLeNet",
          "MultiLeNet: LeNet trunk (conv5-10, conv5-20, dense 50) + one dense head per task "
          "(MultiMNIST family)")
class MultiLeNet:
    width: int = knob(50, "trunk output width", lo=1)
    head_hidden: Optional[int] = _head_hidden("a hidden ReLU layer of n units per head (50: "
                                              "Sener & Koltun's heads)")


@declares("model", "mtl_mlp", "fedmoo.models.multitask:MTLMLP",
          "Multi-task MLP: ReLU trunk on flat inputs + one linear head per task (River Flow)")
class MTLMLP:
    hidden: Any = knob([256, 128], "trunk layer widths", test=widths_problem)
    head_hidden: Optional[int] = _head_hidden()


@declares("model", "mtl_resnet18", "fedmoo.models.multitask:MTLResNet18",
          "ResNet-18 (GroupNorm) trunk without its last layer + one linear head per task "
          "(CelebA's 40 attributes)")
class MTLResNet(ResNet):
    head_hidden: Optional[int] = _head_hidden()


declare("model", "cnn_cifar", NoKnobs, "fedmoo.models.cnn:CNNCifar",
        "FedMGDA+ Table 2 CIFAR CNN: 2 conv 5x5(64) + LRN, dense 384-192 (797,962 params)")
declare("model", "cnn_fmnist", NoKnobs, "fedmoo.models.cnn:CNNFmnist",
        "FedMGDA+ Table 3 FMNIST CNN: conv 10, conv 20, dense 50 (21,840 params)")
declare("model", "cnn_femnist", NoKnobs, "fedmoo.models.cnn:CNNFemnist",
        "FedMGDA+ Table 4 / Reddi et al. EMNIST CNN: conv 32, conv 64, dense 128 "
        "(1,206,590 params)")
declare("model", "cnn_mnist", NoKnobs, "fedmoo.models.cnn:CNNMnist",
        "FedFV MNIST CNN: conv 5x5 32 and 64 (padding 2), dense 3136-512")
