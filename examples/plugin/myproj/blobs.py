"""Blobs (plugin example data source): Gaussian clusters, one per class, generated in memory.

Its settings (``data.*``) are declared here; fedmoo checks them, fills in their defaults and
passes them to ``load`` as keywords. conf/data/blobs.yaml adds what a declaration cannot say
(the model and partition that ``data=blobs`` picks)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedmoo.config.hparams import declare
from fedmoo.config.hparams.data import Dataset
from fedmoo.config.knobs import knob
from fedmoo.data import Source


@dataclass
class Blobs(Dataset):          # Dataset: input_shape and num_classes, which the data fixes
    samples: int = knob(100, "points per class", lo=1)
    spread: float = knob(1.0, "standard deviation of each cluster", lo=0.0, lo_open=True)
    seed: int = knob(0, "draws the centres and the points", lo=0)


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


declare("data", "blobs", Blobs, load,
        "Blobs (plugin example): three Gaussian clusters in 2-D, generated (no files), iid clients",
        input_shape=(2,), num_classes=3)
