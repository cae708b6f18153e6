"""In a lockstep group each job's files are final when its own last round is, not when the
group's longest job ends: a process killed in between keeps the short job's result."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from fedmoo.report.results import read_summary
from tests.conftest import ROOT
from tests.reliability.helpers import wait_rows

ARGS = ["run", "-m", "data=synthetic", "num_clients=6", "clients_per_round=3",
        "data.max_samples=60", "engine=batched", "device=cpu", "progress=false",
        "checkpoint_every=0", "rounds=2,5000", "hydra/launcher=lockstep", "hydra.sweep.dir=sweep"]


def _start(cwd):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "fedmoo", *ARGS], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _short_job_is_final(job) -> None:
    summary = read_summary(job / "summary.json")
    assert summary is not None and summary["status"] == "completed", summary
    assert summary["rounds_completed"] == 2
    assert summary["trained_with"] == "lockstep group of 2 runs"
    assert (job / "model.pt").exists() and (job / "clients.csv").exists()
    assert not (job / "checkpoint.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_job_that_ends_first_is_final_before_the_group_ends(tmp_path, sig):
    proc = _start(tmp_path)
    wait_rows(tmp_path / "sweep" / "1" / "rounds.csv", 4, proc)   # round 4 of the long job
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (-sig, 128 + sig), err
    _short_job_is_final(tmp_path / "sweep" / "0")
    long_job = read_summary(tmp_path / "sweep" / "1" / "summary.json")
    if sig == signal.SIGKILL:
        assert long_job is None
    else:                                   # only the job still training is interrupted
        assert long_job["status"] == "interrupted"
        assert "stopped by SIGTERM after round" in err.strip().splitlines()[-1]
