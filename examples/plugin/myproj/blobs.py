"""Blobs (plugin example data source): Gaussian clusters, one per class, generated in memory.

Its settings (``data.*``) are declared in ``myproj/hparams.py``; fedmoo checks them, fills in
their defaults and passes them here as keywords."""

from __future__ import annotations

import torch

from fedmoo.data import Source


def load(data_dir, *, samples: int, spread: float, seed: int) -> Source:
    """``samples`` points per class around three random centres in 2-D, about 20 % of them
    held out as the test split."""
    g = torch.Generator().manual_seed(seed)
    classes = 3
    centres = torch.randn(classes, 2, generator=g) * 3
    y = torch.arange(classes).repeat_interleave(samples)
    x = centres[y] + spread * torch.randn(len(y), 2, generator=g)
    is_test = torch.rand(len(y), generator=g) < 0.2
    return Source(x=x, y=y, is_test=is_test, num_classes=classes, input_shape=(2,),
                  location="memory (generated, no files)")

