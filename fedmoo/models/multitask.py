"""Multi-task networks: a shared trunk and one head per task, ``forward`` -> ``[B, S, C]`` (C = 1
for regression). Task s's head parameters are ``heads.<s>.*``; ``param_tasks`` turns that into
the owner of every flat-vector coordinate (the engines keep other heads' deltas exactly zero)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedmoo.models import Model
from fedmoo.models.cnn import ConvPoolReLU, flat_size, image_shape
from fedmoo.models.linear import relu_layers
from fedmoo.models.resnet import FEATURES, stem_and_blocks

HEADS = "heads."


class MultiTaskNet(Model):
    """Trunk ``x -> z`` (the subclass's ``make_trunk``) and one head per task ``z -> logits``
    (linear, or with ``head_hidden`` ReLU units), stacked to ``[B, S, C]``. ``paper_tasks`` is the
    number of heads when the data is not known (``fedmoo describe --model-only``)."""

    multitask = True
    paper_tasks: ClassVar[int]

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, num_tasks: int,
                 **hyperparameters):
        super().__init__(hyperparameters)
        self.trunk, width = self.make_trunk(tuple(input_shape))
        head_hidden = self.hparams["head_hidden"]

        def head() -> nn.Module:
            if head_hidden is None:
                return nn.Linear(width, num_classes)
            return nn.Sequential(nn.Linear(width, head_hidden), nn.ReLU(),
                                 nn.Linear(head_hidden, num_classes))

        self.heads = nn.ModuleList([head() for _ in range(num_tasks)])

    def make_trunk(self, input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
        """The shared trunk for inputs of ``input_shape`` and the width of its output."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        z = self.trunk(x)
        return torch.stack([h(z) for h in self.heads], dim=1)


class _LeNetTrunk(nn.Module):
    def __init__(self, c: int, h: int, w: int, width: int):
        super().__init__()
        self.conv1 = ConvPoolReLU(c, 10, 5)
        self.conv2 = ConvPoolReLU(10, 20, 5)
        self.fc = nn.Linear(flat_size(self.conv2, h, w, 2, 2), width)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.fc(self.conv2(self.conv1(x)).flatten(1)))


class MultiLeNet(MultiTaskNet):
    """MultiLeNet (Sener & Koltun 2018, as in the MOO/FMOL literature): conv5x5(10), maxpool 2,
    ReLU, conv5x5(20), maxpool 2, ReLU, dense ``width``-ReLU (320 inputs on 28x28) as the trunk;
    each head is dense classes (``head_hidden: 50`` gives Sener & Koltun's dense
    50-ReLU-classes). Two tasks (MultiMNIST's L and R) when the data is not known."""

    name = "multi_lenet"
    paper_tasks = 2

    def make_trunk(self, input_shape):
        c, h, w = image_shape(input_shape, self.name)
        width = self.hparams["width"]
        return _LeNetTrunk(c, h, w, width), width


class MTLMLP(MultiTaskNet):
    """River Flow's multi-task MLP: ReLU layers ``hidden`` on the flattened input as the trunk,
    one linear head per task (num_classes outputs; 1 for regression). Eight tasks (River Flow's
    sites) when the data is not known."""

    name = "mtl_mlp"
    paper_tasks = 8

    def make_trunk(self, input_shape):
        sizes = [math.prod(input_shape), *self.hparams["hidden"]]
        return nn.Sequential(nn.Flatten(), *relu_layers(sizes)), sizes[-1]


class _ResNetTrunk(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.stem, self.blocks = stem_and_blocks(channels, groups)

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.stem(x)).mean(dim=(2, 3))


class MTLResNet18(MultiTaskNet):
    """ResNet-18 (GroupNorm, as ``resnet18_gn``) without its last layer as the trunk, one linear
    head per task (CelebA's 40 attributes in the FMGDA paper, also when the data is not known)."""

    name = "mtl_resnet18"
    paper_tasks = 40

    def make_trunk(self, input_shape):
        c = image_shape(input_shape, self.name)[0]
        return _ResNetTrunk(c, self.hparams["groups"]), FEATURES


def param_tasks(model: nn.Module) -> Tensor:
    """``[d]`` int64 over the flat trainable parameters: the task whose head owns the coordinate,
    or -1 on the shared trunk (everything, for a model without ``heads.<s>`` parameters)."""
    cols = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            owner = int(name[len(HEADS):].split(".")[0]) if name.startswith(HEADS) else -1
            cols.append(torch.full((p.numel(),), owner, dtype=torch.long))
    return torch.cat(cols) if cols else torch.zeros(0, dtype=torch.long)
