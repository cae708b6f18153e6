"""Checkpoints and exact resume: in-process crash, SIGKILL and SIGTERM of the real CLI."""

from __future__ import annotations

import dataclasses
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fedmoo import algorithms
from fedmoo.run import checkpoint
from fedmoo import engine as fengine
from fedmoo.run.loop import run
from fedmoo.state import ServerState
from tests.conftest import ROOT, crash_in_round, small_cfg
from tests.inprocess import run_main
from tests.reliability.helpers import ONE_THREAD, SMALL, rows_without_time, summary, wait_rows


def _same_model(a, b) -> bool:
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@dataclass
class RichState(ServerState):
    """A state like AFL's / FedFV's: tensors, numbers, strings, dicts and lists."""

    lam: torch.Tensor = field(default_factory=lambda: torch.zeros(3))
    history: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def test_checkpoint_round_trip_is_weights_only_and_restores_rngs(tmp_path):
    st = RichState(w=torch.arange(4.0), round=7, lam=torch.tensor([0.2, 0.3, 0.5]),
                   history=[torch.ones(2), 3.5], meta={"norm": 2.0, "name": "x"})
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    rows = [{"round": 7, "test/acc_mean": 51.25}]
    checkpoint.save(tmp_path, st, rows, {"seed": 0, "progress": False}, elapsed_s=1.5)
    expect = (torch.rand(3), np.random.rand(3), random.random())
    assert not list(tmp_path.glob(".*.tmp"))
    ckpt = checkpoint.load(tmp_path, torch.device("cpu"))  # torch.load(weights_only=True)
    back = dataclasses.replace(RichState(w=torch.zeros(4)), **ckpt["state"])
    assert isinstance(back, RichState) and back.round == 7 and torch.equal(back.w, st.w)
    assert torch.equal(back.lam, st.lam) and back.meta == st.meta
    assert torch.equal(back.history[0], torch.ones(2)) and back.history[1] == 3.5
    assert ckpt["rows"] == rows and ckpt["config"] == {"seed": 0} and ckpt["elapsed_s"] == 1.5
    torch.rand(5), np.random.rand(5), random.random()  # move every generator on
    checkpoint.set_rng_state(ckpt["rng"])
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(again[0], expect[0]) and np.array_equal(again[1], expect[1])
    assert again[2] == expect[2]


def test_unreadable_checkpoint_is_a_user_error(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    from fedmoo.errors import UserError

    with pytest.raises(UserError, match="cannot be read .* resume=false"):
        checkpoint.load(tmp_path, torch.device("cpu"))


def test_crash_then_resume_equals_uninterrupted_run(tmp_path, monkeypatch):
    cfg = dict(small_cfg(rounds=6, checkpoint_every=2), resume=True)
    run(cfg, tmp_path / "full")

    real_build = crash_in_round(monkeypatch, 5)      # dies in round 5 (after checkpoint 4)
    with pytest.raises(RuntimeError, match="node lost"):
        run(cfg, tmp_path / "cut")
    ckpt = checkpoint.load(tmp_path / "cut", torch.device("cpu"))
    assert ckpt["round"] == 4 and [r["round"] for r in ckpt["rows"]] == [1, 2, 3, 4]
    monkeypatch.setattr(fengine, "build", real_build)

    res = run(cfg, tmp_path / "cut")
    assert res.resumed_from == 4 and [r["round"] for r in res.rows] == [1, 2, 3, 4, 5, 6]
    assert rows_without_time(tmp_path / "cut" / "rounds.csv") == \
        rows_without_time(tmp_path / "full" / "rounds.csv")
    assert _same_model(tmp_path / "cut" / "model.pt", tmp_path / "full" / "model.pt")
    assert summary(tmp_path / "cut")["resumed_from"] == 4
    assert not (tmp_path / "cut" / "checkpoint.pt").exists()


def _start(cwd, *args):
    env = {"PYTHONPATH": str(ROOT), "FEDMOO_DATA": str(cwd / "data"), "PATH": "/usr/bin:/bin",
           **ONE_THREAD}
    return subprocess.Popen([sys.executable, "-m", "fedmoo", "run", *SMALL, *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _reference(run_dir, out):
    """The uninterrupted run of the config the CLI recorded, in-process."""
    cfg = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "config.yaml"), resolve=True)
    return run(dict(cfg, resume=False, progress=False), out)


@pytest.mark.slow
def test_terminated_then_killed_cli_run_resumes_exactly(cli):
    """SIGTERM (clean stop) at round >= 4, resume, SIGKILL at round >= 10, resume to the end:
    the same rows and model as one uninterrupted run. The two runs that are stopped are real
    processes; the last resume runs the same command in this one. (deterministic=true: where
    device=auto is a GPU, its atomic sums would differ between processes.)"""
    args = ["rounds=30", "checkpoint_every=1", "hydra.run.dir=run", "deterministic=true"]
    run_dir = cli.cwd / "run"

    proc = _start(cli.cwd, *args)
    wait_rows(run_dir / "rounds.csv", 4, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM after round" in err.strip().splitlines()[-1]
    assert summary(run_dir)["status"] == "interrupted"
    first = checkpoint.load(run_dir, torch.device("cpu"))["round"]
    assert 4 <= first < 30

    proc = _start(cli.cwd, *args)  # resumes, then dies without warning
    wait_rows(run_dir / "rounds.csv", 10, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    second = checkpoint.load(run_dir, torch.device("cpu"))["round"]
    assert 9 <= second < 30  # the row of a round is written just before its checkpoint

    r = run_main(["run", *SMALL, *args], cli.cwd)  # the same command once more (in-process)
    assert r.returncode == 0, r.stderr
    assert f"resumed after round {second}" in r.stdout
    ref = _reference(run_dir, cli.cwd / "ref")
    assert len(ref.rows) == 30
    assert rows_without_time(run_dir / "rounds.csv") == rows_without_time(ref.run_dir / "rounds.csv")
    assert _same_model(run_dir / "model.pt", ref.run_dir / "model.pt")
    assert summary(run_dir)["status"] == "completed"
    assert not (run_dir / "checkpoint.pt").exists()


def test_state_that_torch_cannot_load_safely_is_refused_when_saving(tmp_path):
    st = RichState(w=torch.zeros(2), meta={"order": np.arange(3)})
    with pytest.raises(TypeError, match=r"RichState.meta\['order'\] is a numpy.ndarray"):
        checkpoint.save(tmp_path, st, [], {}, 0.0)
    assert not (tmp_path / "checkpoint.pt").exists()


@pytest.mark.parametrize("name", algorithms.names())
def test_every_algorithm_state_round_trips(tmp_path, name):
    try:
        algo = algorithms.build({"name": name})
    except TypeError:
        pytest.skip(f"{name} has no default hyperparameters")
    st = algo.init(torch.randn(7), num_clients=4)
    checkpoint.save(tmp_path, st, [], {}, 0.0)
    back = dataclasses.replace(algo.init(torch.zeros(7), num_clients=4),
                               **checkpoint.load(tmp_path, torch.device("cpu"))["state"])
    assert type(back) is type(st) and torch.equal(back.w, st.w) and back.round == st.round
