"""Every algorithm has one slug across module, class, YAML and CLI; bad values give one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from fedmoo.config import hparams
from fedmoo.algorithms import build, get, names
from fedmoo.cli.config import compose
from fedmoo.errors import UserError

CONF = Path(__file__).resolve().parents[2] / "fedmoo" / "conf" / "algo"
EXPECTED = {"fedavg", "fedprox", "qfedavg", "afl", "fedmgda", "fedmgda_plus", "fedavg_n",
            "mgda_prox", "fedfv", "adafed", "term", "ditto", "fedfa", "median", "trimmed_mean",
            "krum", "multikrum", "fmgda", "fsmgda"}


def yaml_algo(name: str, rounds: int = 50) -> dict:
    """The ``algo`` section ``fedmoo run algo=NAME rounds=ROUNDS`` composes."""
    return compose([f"algo={name}", f"rounds={rounds}"])["algo"]


def test_every_algorithm_of_the_issue_is_declared_and_needs_no_yaml():
    assert set(names()) == EXPECTED
    assert not CONF.exists() or not list(CONF.glob("*.yaml"))
    assert {slug for group, slug in hparams.all_declared() if group == "algo"} == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_option_is_the_declaration(name):
    cls = get(name)
    assert hparams.options("algo")[name]      # described once, in its declaration
    assert cls.__module__.startswith("fedmoo.algorithms.")   # one module per family
    assert "__init__" not in vars(cls), "no constructor of its own: defaults are declared"
    cfg = yaml_algo(name)
    declared = {k.key.partition(".")[2]: k.default for k in hparams.knobs("algo", name)}
    assert cfg.pop("name") == name
    assert set(cfg) == set(declared), "the YAML holds every declared hyperparameter"
    for key, value in cfg.items():
        assert value == declared[key], (key, value, declared[key])
    assert build({"name": name, **cfg}).hparams() == cfg
    assert repr(build(yaml_algo(name))).startswith(f"{name}(")
    assert name == "fedavg" or "FedAvg" in cls.__doc__, "the docstring says what reduces it to FedAvg"


def test_fedmgda_decay_horizon_is_the_run_length_the_runner_gives():
    """eta_decay is the total decay over the run: 0.1 at round T (in steps of 100 rounds)."""
    algo = build({"name": "fedmgda_plus"}, rounds=300)
    assert algo.step_size(0) == 1.0 and algo.step_size(299) == pytest.approx(0.1 ** (200 / 300))
    assert build({"name": "fedmgda_plus"}).step_size(1000) == pytest.approx(0.1 ** 0.5)  # T=2000
    assert "total_rounds" not in compose(["algo=fedmgda_plus"])["algo"]


@pytest.mark.parametrize("name,kwargs,needle", [
    ("fedmgda", {"epsilon": 1.5}, "algo.epsilon=1.5"),
    ("fedmgda_plus", {"epsilon": -0.1}, "algo.epsilon=-0.1"),
    ("fedmgda", {"normalize": "yes"}, "algo.normalize='yes'"),
    ("fedmgda", {"eta_decay": 0.0}, "algo.eta_decay=0.0"),
    ("fedmgda", {"solver": "cvxopt"}, "algo.solver='cvxopt'"),
    ("fedmgda", {"lambda0": "weighted"}, "algo.lambda0='weighted'"),
    ("qfedavg", {"q": -1}, "algo.q=-1 "),
    ("qfedavg", {"L": 0}, "algo.L=0 "),
    ("fedfv", {"alpha": 1.2}, "algo.alpha=1.2"),
    ("fedfv", {"tau": -1}, "algo.tau=-1"),
    ("fedfv", {"tau": 1.5}, "algo.tau=1.5"),
    ("fedfv", {"order": "shuffle"}, "algo.order='shuffle'"),
    ("adafed", {"gamma": -2}, "algo.gamma=-2 "),
    ("adafed", {"loss": "mean"}, "algo.loss='mean'"),
    ("term", {"t": float("inf")}, "algo.t=inf"),
    ("term", {"normalization": "max"}, "algo.normalization='max'"),
    ("ditto", {"lam": -1}, "algo.lam=-1 "),
    ("fedprox", {"mu": -0.1}, "algo.mu=-0.1"),
    ("fedfa", {"gamma": 1.0}, "algo.gamma=1.0"),
    ("afl", {"gamma_lambda": -1}, "algo.gamma_lambda=-1 "),
    ("trimmed_mean", {"beta": 0.5}, "algo.beta=0.5"),
    ("krum", {"f": -1}, "algo.f=-1"),
    ("multikrum", {"m": 0}, "algo.m=0"),
])
def test_bad_hyperparameters_raise_one_line_user_errors(name, kwargs, needle):
    with pytest.raises(UserError) as err:
        build({"name": name, **kwargs})
    msg = str(err.value)
    assert needle in msg and name in msg and "\n" not in msg


@pytest.mark.parametrize("name,kwargs,n,k,needle", [
    ("afl", {}, 30, 10, "clients_per_round=null"),
    ("krum", {"f": 2}, 30, 6, "clients_per_round >= 2f+3 = 7"),
    ("multikrum", {"m": 8}, 30, 7, "algo.m=8"),
])
def test_impossible_run_settings_are_rejected(name, kwargs, n, k, needle):
    algo = build({"name": name, **kwargs})
    with pytest.raises(UserError, match=needle.replace("+", r"\+")):
        algo.check_run(n, k)
    algo.check_run(n, n)


def test_records_with_the_former_total_rounds_key_resume_and_group_with_todays():
    from fedmoo.report.jobs import Job
    from fedmoo.run import identity

    new = {"rounds": 300, "algo": {"name": "fedmgda_plus", "eta": 1.0}}
    old = {"rounds": 300, "algo": {"name": "fedmgda_plus", "eta": 1.0, "total_rounds": 300}}
    assert identity.config_diff(old, new) == ""
    jobs = [Job(path=Path(f"j{i}"), overrides={}, config=c, summary=None)
            for i, c in enumerate((old, new))]
    assert jobs[0].identity() == jobs[1].identity()
