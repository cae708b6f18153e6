"""The attacks' hyperparameters (``attack.*``): who is malicious (``Common``, every attack's keys)
and each attack's own knobs. The attacks' docstrings (fedmoo.attacks) say what each knob does;
docs/attacks.md explains them. ``malicious`` and ``label_flip``'s ``permutation`` take values of
several kinds: their tests below refuse what no federation could take (a fraction above 1, a
client listed twice); what needs the data (ids beyond the clients, client names, the number of
classes) is checked when the attack is bound to the federation."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Optional

from fedmoo.config.hparams import declare, declares
from fedmoo.config.knobs import integer, knob, seed_knob

PERMUTATIONS = ("reverse", "shift", "random")   # label_flip's named permutations
MALICIOUS = ("give client ids ([0,3]), one id (2), a fraction in (0, 1] (0.2) or client names "
             "(phd)")


def malicious_problem(value: Any) -> str | None:
    """What is wrong with ``attack.malicious=value`` whatever the federation; None if nothing."""
    if isinstance(value, float):
        if math.isnan(value) or not 0.0 < value <= 1.0:
            return "as a fraction must be in (0, 1]; or give client ids, e.g. attack.malicious=[0,3]"
        return None
    if isinstance(value, str) or (integer(value) and value >= 0):
        return None
    if integer(value):
        return "is not a client id: ids run from 0; " + MALICIOUS
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(v, str) for v in value):
            return None
        if all(integer(v) for v in value):
            if min(value) < 0:
                return f"contains client {min(value)}, but client ids run from 0"
            if len(set(value)) != len(value):
                return "lists a client twice; list each once"
            return None
    return "is not valid; " + MALICIOUS


def none_malicious_problem(value: Any) -> str | None:
    """``attack=none`` also takes null: nobody."""
    return None if value is None else malicious_problem(value)


def permutation_problem(value: Any) -> str | None:
    """What is wrong with ``attack.permutation=value`` whatever the number of classes."""
    if value in PERMUTATIONS:
        return None
    if (isinstance(value, (list, tuple)) and value and all(integer(v) for v in value)
            and sorted(value) == list(range(len(value)))):
        return None
    return (f"is not valid; choose {', '.join(PERMUTATIONS)} or a list of the class ids in a new "
            "order, e.g. [1,0,2]")


@dataclass
class Common:
    """Who attacks, and when (docs/attacks.md "Who is malicious")."""

    malicious: Any = knob(0.1, "who attacks: client ids [0,3], one id 2, a fraction in (0, 1] "
                          "(0.2: that share of the clients, drawn with seed) or client names "
                          "(phd)", test=malicious_problem)
    always_participate: bool = knob(False, "true: the attackers join every round (the sampler "
                                    "swaps them in)")
    seed: int = seed_knob("seeds the choice of attackers and the attack's own noise (not the "
                     "training seed)")


@declares("attack", "none", "fedmoo.attacks.none:NoAttack",
          "No attack: every client is honest (malicious may name would-be attackers that stay "
          "honest)")
class NoAttack(Common):
    malicious: Any = knob(None, "null = nobody; ids, a fraction or names mark would-be attackers "
                          "that stay honest (reported as benign/ and attackers/ like an attack)",
                          test=none_malicious_problem)


@declares("attack", "bias", "fedmoo.attacks.bias:Bias",
          "Bias attack: attackers report loss + b, updates honest (FedMGDA+ Adult table)")
class Bias(Common):
    b: float = knob(10.0, "added to every reported loss; 0 = honest")


@declares("attack", "loss_scaling", "fedmoo.attacks.loss_scaling:LossScaling",
          "Loss scaling: attackers train on and report c * loss, so their updates scale too "
          "(FedMGDA+ CIFAR-10)")
class LossScaling(Common):
    c: float = knob(10.0, "the attackers train on and report c * loss; 1 = honest", lo=0.0,
                    lo_open=True)


@declares("attack", "update_scaling", "fedmoo.attacks.update_scaling:UpdateScaling",
          "Update scaling: attackers send factor * their update (losses honest)")
class UpdateScaling(Common):
    factor: float = knob(10.0, "the attackers send factor * their update; 1 = honest, negative "
                         "= a scaled sign flip")


@declares("attack", "sign_flip", "fedmoo.attacks.sign_flip:SignFlip",
          "Sign flip: attackers send -scale * their update (gradient ascent)")
class SignFlip(Common):
    scale: float = knob(1.0, "the attackers send -scale * their update", lo=0.0)


@declares("attack", "gaussian", "fedmoo.attacks.gaussian:Gaussian",
          "Gaussian: attackers send a random update of a given norm (null = their honest norm)")
class Gaussian(Common):
    norm: Optional[float] = knob(None, "norm of the random update; null = the norm of the "
                                 "attacker's honest update", lo=0.0, lo_open=True)


@declares("attack", "model_replacement", "fedmoo.attacks.model_replacement:ModelReplacement",
          "Model replacement / boosting: attackers send w + m (w_k - w), i.e. m * their update")
class ModelReplacement(Common):
    boost: Optional[float] = knob(None, "m: the attackers send m * their update; null = cohort "
                                  "samples / attackers' samples (replaces the FedAvg model)",
                                  lo=0.0, lo_open=True)


@declares("attack", "label_flip", "fedmoo.attacks.label_flip:LabelFlip",
          "Label flip: attackers train on labels permuted by pi (data poisoning)")
class LabelFlip(Common):
    permutation: Any = knob("reverse", "the attackers' labels y become pi(y): reverse (C-1-y) | "
                            "shift (y+1 mod C) | random (drawn with seed) | a list of the C "
                            "class ids", test=permutation_problem)


declare("attack", "zero_update", Common, "fedmoo.attacks.zero_update:ZeroUpdate",
        "Zero update: attackers send no change (free riders)")

COMMON = tuple(f.name for f in fields(Common))   # every attack's keys
