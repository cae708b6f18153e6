"""A plugin's attack and model declare their keys in their own module, beside their code:
the run takes them with their declared defaults, and a bad value or key is refused before
anything is made."""

from __future__ import annotations

import json

from tests.conftest import ROOT

SMALL = ["progress=false", "num_clients=6", "clients_per_round=3", "data.max_samples=100",
         "rounds=1"]

MODULE = '''
import math
from dataclasses import dataclass

from torch import nn

from fedmoo.attacks.base import Attack, scale_rows
from fedmoo.config.hparams import declare
from fedmoo.config.hparams.attack import Common
from fedmoo.config.knobs import knob


@dataclass
class ShrinkParams(Common):
    factor: float = knob(0.5, "the attackers send factor * their update", lo=0.0)


class Shrink(Attack):
    def corrupt(self, cohort, rows, seed):
        return cohort.replace(deltas=scale_rows(cohort.deltas, rows, self.factor))


@dataclass
class TinyParams:
    width: int = knob(4, "hidden units", lo=1)


class Tiny(nn.Module):
    def __init__(self, input_shape, num_classes, width):   # no default: the declaration's
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), width),
                                 nn.ReLU(), nn.Linear(width, num_classes))

    def forward(self, x):
        return self.net(x)


declare("attack", "shrink", ShrinkParams, Shrink, "Shrink: attackers send factor * their update")
declare("model", "tiny", TinyParams, Tiny, "Tiny: one hidden layer")
'''


def _plugin(root):
    """A plugin as a user writes it: one module with its declarations and its code, no YAML."""
    pkg = root / "shrinkproj"
    pkg.mkdir()
    (pkg / "fedmoo-plugin").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "parts.py").write_text(MODULE)


def test_a_plugin_attack_and_model_take_their_declared_keys(cli):
    _plugin(cli.cwd)
    env = {"FEDMOO_PLUGINS": "shrinkproj", "PYTHONPATH": f"{ROOT}:{cli.cwd}"}
    r = cli("run", *SMALL, "attack=shrink", "attack.malicious=[2]", "model=tiny",
            "model.width=3", "hydra.run.dir=a", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads((cli.cwd / "a" / "attack.json").read_text()) == {
        "name": "shrink", "attackers": [2], "factor": 0.5, "malicious": [2],
        "always_participate": False, "seed": 0}
    summary = json.loads((cli.cwd / "a" / "summary.json").read_text())
    assert summary["num_params"] == 60 * 3 + 3 + 3 * 10 + 10      # width 3, synthetic 60 -> 10
    for bad, line in ((["attack.factor=-1"], "attack.factor=-1 must be a number in [0.0, inf)"),
                      (["attack.malicious=2.5"], "attack.malicious=2.5 as a fraction must be in"),
                      (["model.width=0"], "model.width=0 must be a positive integer"),
                      (["+model.depth=2"], "model.depth is not a hyperparameter of model=tiny; "
                                           "valid keys: width")):
        r = cli("run", *SMALL, "attack=shrink", "model=tiny", *bad, "hydra.run.dir=b", env=env)
        lines = r.stderr.splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0].startswith(f"fedmoo: error: {line}"), r.stderr
        assert not (cli.cwd / "b").exists()
