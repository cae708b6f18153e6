"""LossAvg's hyperparameters, declared for fedmoo (``fedmoo.hparams``). fedmoo reads this file
before it imports torch or this package, to check a run's ``algo.*`` values: keep torch out."""

from dataclasses import dataclass

from fedmoo.hparams import declare
from fedmoo.knobs import knob


@dataclass
class LossAvg:
    power: float = knob(1.0, "exponent of the loss in the weights; 0 = FedAvg with uniform "
                        "weights", lo=0.0)
    eta: float = knob(1.0, "server learning rate", lo=0.0, lo_open=True)


declare("algo", "lossavg", LossAvg)
