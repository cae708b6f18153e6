"""Multi-task networks: a shared trunk and one head per task (FMGDA / FSMGDA, multi-task data).

``forward`` returns ``[B, S, C]``: the logits of every task (C = num_classes; C = 1 for
regression). The parameters of task s's head are named ``heads.<s>.*``; everything else is the
shared trunk. ``param_tasks`` turns that convention into the owner of every coordinate of the
flat parameter vector, which the engines use to keep other heads' deltas exactly zero.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedmoo.models.cnn import ConvPoolReLU, image_shape
from fedmoo.models.resnet import FEATURES, stem_and_blocks

HEADS = "heads."


class MultiTaskNet(nn.Module):
    """Trunk ``x -> z`` and heads ``z -> logits`` (one per task), stacked to ``[B, S, C]``."""

    multitask = True

    def __init__(self, trunk: nn.Module, width: int, num_tasks: int, num_classes: int,
                 head_hidden: int | None = None):
        super().__init__()
        if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
            raise ValueError(f"num_tasks={num_tasks!r} must be a positive integer")
        self.trunk = trunk

        def head() -> nn.Module:
            if head_hidden is None:
                return nn.Linear(width, num_classes)
            return nn.Sequential(nn.Linear(width, int(head_hidden)), nn.ReLU(),
                                 nn.Linear(int(head_hidden), num_classes))

        self.heads = nn.ModuleList([head() for _ in range(num_tasks)])

    def forward(self, x: Tensor) -> Tensor:
        z = self.trunk(x)
        return torch.stack([h(z) for h in self.heads], dim=1)


class _LeNetTrunk(nn.Module):
    def __init__(self, c: int, h: int, w: int, width: int):
        super().__init__()
        self.conv1 = ConvPoolReLU(c, 10, 5)
        self.conv2 = ConvPoolReLU(10, 20, 5)
        hh, ww = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
        self.fc = nn.Linear(20 * hh * ww, width)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.fc(self.conv2(self.conv1(x)).flatten(1)))


class MultiLeNet(MultiTaskNet):
    """MultiLeNet (Sener & Koltun 2018, as in the MOO/FMOL literature): conv5x5(10), maxpool 2,
    ReLU, conv5x5(20), maxpool 2, ReLU, dense 50-ReLU (320 inputs on 28x28) as the trunk; each
    head is dense classes (``head_hidden: 50`` gives Sener & Koltun's dense 50-ReLU-classes)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, num_tasks: int = 2,
                 width: int = 50, head_hidden: int | None = None):
        c, h, w = image_shape(input_shape, "multi_lenet")
        super().__init__(_LeNetTrunk(c, h, w, width), width, num_tasks, num_classes, head_hidden)


class MTLMLP(MultiTaskNet):
    """River Flow's multi-task MLP: ReLU layers ``hidden`` on the flattened input as the trunk,
    one linear head per task (num_classes outputs; 1 for regression)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, num_tasks: int = 8,
                 hidden=(256, 128), head_hidden: int | None = None):
        sizes = [math.prod(input_shape), *[int(h) for h in hidden]]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        super().__init__(nn.Sequential(*layers), sizes[-1], num_tasks, num_classes, head_hidden)


class _ResNetTrunk(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.stem, self.blocks = stem_and_blocks(channels, groups)

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.stem(x)).mean(dim=(2, 3))


class MTLResNet18(MultiTaskNet):
    """ResNet-18 (GroupNorm, as ``resnet18_gn``) without its last layer as the trunk, one linear
    head per task (CelebA's 40 attributes in the FMGDA paper)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, num_tasks: int = 40,
                 groups: int = 2, head_hidden: int | None = None):
        c = image_shape(input_shape, "mtl_resnet18")[0]
        super().__init__(_ResNetTrunk(c, groups), FEATURES, num_tasks, num_classes, head_hidden)


def param_tasks(model: nn.Module) -> Tensor:
    """``[d]`` int64 over the flat trainable parameters: the task whose head owns the coordinate,
    or -1 on the shared trunk (everything, for a model without ``heads.<s>`` parameters)."""
    cols = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            owner = int(name[len(HEADS):].split(".")[0]) if name.startswith(HEADS) else -1
            cols.append(torch.full((p.numel(),), owner, dtype=torch.long))
    return torch.cat(cols) if cols else torch.zeros(0, dtype=torch.long)
