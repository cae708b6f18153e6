"""The papers' convolutional networks. Layer tables are in the docstrings; sizes follow the input
shape of the dataset, so e.g. ``cnn_cifar`` also runs on CINIC-10."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedmoo.errors import UserError
from fedmoo.models import Model


def image_shape(input_shape: tuple[int, ...], model: str) -> tuple[int, int, int]:
    """``(C, H, W)`` of an image dataset, or a UserError for other inputs."""
    if len(input_shape) != 3:
        raise UserError(f"model={model} needs image inputs [C, H, W] but the data gives "
                        f"{list(input_shape)}; choose model=logreg or model=mlp for this data")
    return input_shape


def flat_size(conv: nn.Conv2d, h: int, w: int, *pools: int) -> int:
    """Dense inputs after convolutions like ``conv`` on h x w, each max-pooled by one of pools."""
    k, p = conv.kernel_size[0], conv.padding[0]
    for pool in pools:
        h, w = (h + 2 * p - k + 1) // pool, (w + 2 * p - k + 1) // pool
    return conv.out_channels * h * w


class ConvPoolReLU(nn.Conv2d):
    """``relu(max_pool2d(conv(x), 2))`` as one module with the convolution's parameters (the
    same names and state as the ``nn.Conv2d`` it stands for). A CPU's fast layout
    (``fedmoo.engine.cpu_layout.fast_layout``) runs it as one fused kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.max_pool2d(super().forward(x), 2))


class CNNCifar(Model):
    """FedMGDA+ Table 2 (797,962 parameters on CIFAR-10): conv5x5(64)-ReLU, maxpool 2, LRN(2),
    conv5x5(64)-ReLU, LRN(2), maxpool 2, dense 384-ReLU, dense 192-ReLU, dense classes."""

    name = "cnn_cifar"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        c, h, w = image_shape(input_shape, self.name)
        self.conv1 = nn.Conv2d(c, 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        self.lrn = nn.LocalResponseNorm(2)
        self.fc1 = nn.Linear(flat_size(self.conv2, h, w, 2, 2), 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lrn(F.max_pool2d(F.relu(self.conv1(x)), 2))
        x = F.max_pool2d(self.lrn(F.relu(self.conv2(x))), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class CNNFmnist(Model):
    """FedMGDA+ Table 3 (21,840 parameters on FMNIST): conv5x5(10)-ReLU, maxpool 2,
    conv5x5(20)-ReLU, maxpool 2, Dropout2d(0.5), dense 50-ReLU, Dropout(0.5), dense classes."""

    name = "cnn_fmnist"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        c, h, w = image_shape(input_shape, self.name)
        self.conv1 = nn.Conv2d(c, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        self.drop2d = nn.Dropout2d(0.5)
        self.drop = nn.Dropout(0.5)
        self.fc1 = nn.Linear(flat_size(self.conv2, h, w, 2, 2), 50)
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = self.drop2d(F.max_pool2d(F.relu(self.conv2(x)), 2))
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


class CNNFemnist(Model):
    """FedMGDA+ Table 4 = Reddi et al.'s EMNIST CNN (1,206,590 parameters, 62 classes):
    conv3x3(32)-ReLU, conv3x3(64)-ReLU, maxpool 2, Dropout(0.25), dense 128-ReLU, Dropout(0.5),
    dense classes."""

    name = "cnn_femnist"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        c, h, w = image_shape(input_shape, self.name)
        self.conv1 = nn.Conv2d(c, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.drop1 = nn.Dropout(0.25)
        self.drop2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(flat_size(self.conv2, h, w, 1, 2), 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.drop1(F.max_pool2d(x, 2))
        return self.fc2(self.drop2(F.relu(self.fc1(x.flatten(1)))))


class CNNMnist(Model):
    """FedFV's MNIST CNN: conv5x5(32, pad 2)-ReLU, maxpool 2, conv5x5(64, pad 2)-ReLU, maxpool 2,
    dense 512-ReLU (3136 inputs on 28x28), dense classes."""

    name = "cnn_mnist"

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **hyperparameters):
        super().__init__(hyperparameters)
        c, h, w = image_shape(input_shape, self.name)
        self.conv1 = nn.Conv2d(c, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(flat_size(self.conv2, h, w, 2, 2), 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))
