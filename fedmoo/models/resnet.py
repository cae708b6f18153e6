"""ResNet-18 with GroupNorm (AdaFed's CIFAR-100 / CINIC-10 / Tiny-ImageNet model): CIFAR-style
3x3 stem, four stages of two basic blocks (64/128/256/512 channels), global average pooling.
GroupNorm keeps it free of running statistics (BatchNorm fails under non-IID data, Hsieh 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedmoo.models import Model
from fedmoo.models.cnn import image_shape


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.GroupNorm(groups, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


FEATURES = 512  # width of the pooled features


def stem_and_blocks(channels: int, groups: int) -> tuple[nn.Module, nn.Module]:
    """The convolutional body: the 3x3 stem and the four stages of two basic blocks."""
    stem = nn.Sequential(nn.Conv2d(channels, 64, 3, 1, 1, bias=False), nn.GroupNorm(groups, 64),
                         nn.ReLU())
    blocks, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (FEATURES, 2)):
        blocks += [BasicBlock(cin, cout, stride, groups), BasicBlock(cout, cout, 1, groups)]
        cin = cout
    return stem, nn.Sequential(*blocks)


class ResNet18GN(Model):
    """ResNet-18 with GroupNorm (``groups`` per layer) in place of BatchNorm."""

    name = "resnet18_gn"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        c = image_shape(input_shape, self.name)[0]
        self.stem, self.blocks = stem_and_blocks(c, self.hparams["groups"])
        self.fc = nn.Linear(FEATURES, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))
