"""The plugin's components, declared for fedmoo (``fedmoo.config.hparams.declare``): each one's
slug, the ``module:attr`` that implements it, its description and its hyperparameters. The declaration
is the option itself (``algo=lossavg``; no YAML needed). fedmoo reads this file before it
imports torch or this package, to check a run's ``algo.*`` and ``data.*`` values: keep torch
out."""

from dataclasses import dataclass

from fedmoo.config.hparams import declare
from fedmoo.config.hparams.data import Dataset
from fedmoo.config.knobs import knob


@dataclass
class LossAvg:
    power: float = knob(1.0, "exponent of the loss in the weights; 0 = FedAvg with uniform "
                        "weights", lo=0.0)
    eta: float = knob(1.0, "server learning rate", lo=0.0, lo_open=True)


declare("algo", "lossavg", LossAvg, "myproj.lossavg:LossAvg",
        "LossAvg (plugin example): clients weighted by loss^power before training")


@dataclass
class Blobs(Dataset):          # Dataset: input_shape and num_classes, which the data fixes
    samples: int = knob(100, "points per class", lo=1)
    spread: float = knob(1.0, "standard deviation of each cluster", lo=0.0, lo_open=True)
    seed: int = knob(0, "draws the centres and the points", lo=0)


declare("data", "blobs", Blobs, "myproj.blobs:load",
        "Blobs (plugin example): three Gaussian clusters in 2-D, generated (no files), iid clients",
        input_shape=(2,), num_classes=3)
