"""Runs trained together (fedmoo.run.group, hydra/launcher=lockstep) end exactly as alone.

The correctness gate: a mixed sweep (two seeds, stateful and stateless algorithms, Ditto's
personal rows, FedProx's proximal term, two learning rates, local steps vs epochs, a
label-flipping attack, unequal client sizes, one job that diverges) run grouped and one job at a
time in float64 must give the same rounds.csv (time columns aside) and final model to 1e-10.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from fedmoo.cli.config import compose
from fedmoo.errors import DivergenceError
from fedmoo.report.results import read_summary
from fedmoo.run import group, loop
from tests.conftest import ROOT
from tests.inprocess import run_main
from tests.reliability.helpers import wait_rows

TOL = 1e-10
BASE = ["data=synthetic", "num_clients=6", "clients_per_round=3", "rounds=4", "eval_every=1",
        "data.max_samples=60", "engine=batched", "precision=float64", "device=cpu",
        "progress=false", "checkpoint_every=2", "client.batch_size=8"]
SWEEP = [
    ["seed=0", "algo=fedavg", "client.lr=0.05"],
    ["seed=1", "algo=fedavg", "client.lr=0.1"],
    ["seed=0", "algo=fedfv", "client.lr=0.1"],                      # state across rounds
    ["seed=1", "algo=ditto", "client.lr=0.05"],                     # personal rows and state
    ["seed=0", "algo=fedprox", "algo.mu=0.5", "client.local_steps=3"],
    ["seed=1", "algo=fedavg", "attack=label_flip", "attack.malicious=[0,1]", "client.epochs=2"],
    ["seed=0", "algo=fedavg", "client.lr=3", "diverge_norm=25"],    # diverges in round 3
]


@pytest.fixture(scope="module")
def configs():
    return [compose(BASE + overrides) for overrides in SWEEP]


def _alone(cfg, path):
    try:
        return loop.run(cfg, path)
    except DivergenceError as e:
        return e


def _compare(a, b):
    ra, rb = pd.read_csv(a / "rounds.csv"), pd.read_csv(b / "rounds.csv")
    cols = [c for c in ra.columns if not c.startswith("time/")]
    assert list(ra.columns) == list(rb.columns)
    assert len(ra) == len(rb) > 0
    diff = (ra[cols] - rb[cols]).abs().max().max()
    assert diff <= TOL, f"{a.name}: rounds.csv differs by {diff}"
    if (a / "model.pt").exists() or (b / "model.pt").exists():
        ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
        for k in ma:
            assert ma[k].dtype == torch.float64
            assert torch.allclose(ma[k], mb[k], rtol=0, atol=TOL), k


def test_grouped_sweep_equals_one_job_at_a_time(tmp_path, configs):
    """Each job of a group as alone (bit for bit in float32: tests/run/test_group_invariance.py)."""
    alone = [_alone(cfg, tmp_path / "alone" / str(i)) for i, cfg in enumerate(configs)]
    plans = []
    outcomes = group.run_jobs([group.Job(cfg, tmp_path / "grouped" / str(i))
                               for i, cfg in enumerate(configs)], on_plan=plans.append)
    (plan,) = plans
    assert plan.groups == [list(range(len(configs)))] and plan.alone == []
    for i, (a, g) in enumerate(zip(alone, outcomes)):
        assert type(a) is type(g), (i, a, g)
        _compare(tmp_path / "alone" / str(i), tmp_path / "grouped" / str(i))
    # the diverged job stopped with its own status; the others completed
    assert isinstance(outcomes[-1], DivergenceError)
    assert read_summary(tmp_path / "grouped" / "6" / "summary.json")["status"] == "diverged"
    for i in range(6):
        summary = read_summary(tmp_path / "grouped" / str(i) / "summary.json")
        assert summary["status"] == "completed"
        assert summary["trained_with"] == f"lockstep group of {len(configs)} runs"
        assert summary["rounds_completed"] == 4


def test_max_rows_splits_groups_and_other_engines_run_alone(tmp_path, configs):
    cfgs = [configs[0], configs[1], configs[2], {**configs[3], "engine": "sequential"}]
    plans = []
    outcomes = group.run_jobs([group.Job(c, tmp_path / str(i)) for i, c in enumerate(cfgs)],
                              max_rows=6, on_plan=plans.append)   # 3 clients per round each
    assert plans[0].groups == [[0, 1], [2]]
    assert [i for i, _ in plans[0].alone] == [3]
    assert "sequential" in plans[0].alone[0][1]
    assert all(isinstance(o, loop.RunResult) for o in outcomes)
    assert read_summary(tmp_path / "2" / "summary.json").get("trained_with") is None


SWEEP_ARGS = ["run", "-m", *BASE, "rounds=20", "checkpoint_every=1", "seed=0,1",
              "algo=fedavg,fedfv", "hydra/launcher=lockstep", "hydra.sweep.dir=sweep"]


def _start(cwd):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "fedmoo", *SWEEP_ARGS], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_grouped_sweep_killed_and_resumed_matches_jobs_run_alone(tmp_path):
    """SIGTERM a lockstep sweep (every job checkpoints), restart it, SIGKILL it 3 rounds after
    it resumed, run it again to the end: every job's rows and model equal the job run alone,
    uninterrupted (20 rounds: the killed process is still training when the kill comes)."""
    sweep = tmp_path / "sweep"
    proc = _start(tmp_path)
    wait_rows(sweep / "0" / "rounds.csv", 4, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "lockstep: 4 of 4 jobs train together in 1 group(s) of 4 runs" in err
    assert "checkpoints saved for the 4 runs training together" in err.strip().splitlines()[-1]
    stopped = [read_summary(sweep / str(i) / "summary.json") for i in range(4)]
    assert {s["status"] for s in stopped} == {"interrupted"}
    assert len({s["rounds_completed"] for s in stopped}) == 1   # the group stops together

    proc = _start(tmp_path)
    wait_rows(sweep / "0" / "rounds.csv", stopped[0]["rounds_completed"] + 3, proc)
    proc.kill()
    proc.communicate(timeout=60)

    done = run_main(SWEEP_ARGS, tmp_path)
    assert done.returncode == 0, done.stderr
    for i in range(4):
        job = sweep / str(i)
        summary = read_summary(job / "summary.json")
        assert summary["status"] == "completed" and summary["resumed_from"] > 0
        cfg = OmegaConf.to_container(OmegaConf.load(job / ".hydra" / "config.yaml"), resolve=True)
        # the reference writes no checkpoints: saving one must not change the run either
        loop.run(dict(cfg, resume=False, progress=False, checkpoint_every=0),
                 tmp_path / "alone" / str(i))
        _compare(tmp_path / "alone" / str(i), job)


def test_runs_with_other_precision_knobs_train_apart_each_with_its_own(tmp_path, configs, monkeypatch):
    """tf32 and deterministic are process-wide torch settings: runs that differ in them are not
    grouped, and each group trains with its own (set when the group starts)."""
    from fedmoo.run import setup

    seen = []
    real = setup.set_deterministic
    monkeypatch.setattr(group, "set_deterministic", lambda flag: seen.append(flag) or real(flag))
    cfgs = [dict(configs[0], deterministic=True), dict(configs[1], deterministic=False),
            dict(configs[2], deterministic=True)]
    plans = []
    outcomes = group.run_jobs([group.Job(c, tmp_path / str(i)) for i, c in enumerate(cfgs)],
                              on_plan=plans.append)
    assert all(isinstance(o, loop.RunResult) for o in outcomes)
    assert sorted(plans[0].groups) == [[0, 2], [1]]
    assert sorted(seen) == [False, True]
    for i, flag in enumerate([True, False, True]):
        assert read_summary(tmp_path / str(i) / "summary.json")["deterministic"] is flag


class TinyConv(torch.nn.Module):
    """A convolution over Synthetic's 60 features seen as a 6 x 10 image."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.head = torch.nn.Linear(2 * 4 * 8, num_classes)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x.view(-1, 1, 6, 10))).flatten(1))


def test_a_model_not_proven_identical_in_a_group_trains_alone(tmp_path, configs, monkeypatch):
    """A CNN in a group differed from its run alone (by rounding without dropout, by points with
    it): it trains alone, and the plan says why."""
    from tests.conftest import declare_impl

    declare_impl(monkeypatch, "model", "tinyconv", TinyConv)
    conv = [{**configs[i], "model": {"name": "tinyconv"}, "rounds": 1} for i in (0, 1)]
    plans = []
    group.run_jobs([group.Job(c, tmp_path / str(i)) for i, c in enumerate(conv)],
                   on_plan=plans.append)
    assert plans[0].groups == [] and [i for i, _ in plans[0].alone] == [0, 1]
    assert "Conv2d layers are not proven" in plans[0].alone[0][1]
    assert all(read_summary(tmp_path / str(i) / "summary.json")["status"] == "completed"
               for i in (0, 1))
