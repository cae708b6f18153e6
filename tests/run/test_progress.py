"""Progress on stderr: plain lines without a terminal, nothing under -q, the multi-task note,
and a sweep's `job k of N` lines with an ETA (counted across processes)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from fedmoo.errors import UserError
from fedmoo.run import progress, sweeps
from tests.inprocess import cli_in

TINY = ["num_clients=6", "clients_per_round=3", "data.max_samples=100"]


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_lines_every_n_seconds_with_eta(caplog):
    clock = Clock()
    bar = progress.Lines(total=10, initial=2, desc="fedfv on mnist", every=30, clock=clock)
    with caplog.at_level(logging.INFO, logger="fedmoo.run.progress"):
        for seconds in (4, 10, 25, 36, 1, 1, 1, 100):     # rounds 3..10
            clock.t += seconds
            bar.set_postfix_str("acc 50.00 std 1.00")
            bar.update(1)
    # the first round (4 s for 1 round, 7 left: 28 s); round 5, 35 s later (39 s for 3 rounds,
    # 5 left: 65 s); round 6, 36 s later (75 s for 4, 4 left); the last one always (178 s)
    assert [r.getMessage() for r in caplog.records] == [
        "fedfv on mnist: round 3 of 10 (30%), 4 s elapsed, about 28 s left; acc 50.00 std 1.00",
        "fedfv on mnist: round 5 of 10 (50%), 39 s elapsed, about 1m05s left; acc 50.00 std 1.00",
        "fedfv on mnist: round 6 of 10 (60%), 1m15s elapsed, about 1m15s left; acc 50.00 std 1.00",
        "fedfv on mnist: round 10 of 10 (100%), 2m58s elapsed; acc 50.00 std 1.00"]


def test_duration_and_the_interval_knob(monkeypatch):
    assert [progress.duration(s) for s in (0.4, 59.4, 60, 185, 7620)] == [
        "0 s", "59 s", "1m00s", "3m05s", "2h07m"]
    monkeypatch.setenv("FEDMOO_PROGRESS_EVERY", "5")
    assert progress.interval() == 5.0
    monkeypatch.setenv("FEDMOO_PROGRESS_EVERY", "soon")
    with pytest.raises(UserError, match=r"^FEDMOO_PROGRESS_EVERY='soon' must be the seconds"):
        progress.interval()


def test_multi_task_rows_show_the_tasks_losses():
    row = {"round": 3, "train/task1_loss": 0.25, "train/task0_loss": 0.5,
           "train/task0_loss_norm": 0.9, "test/task0_loss": 7.0, "test/acc_mean": float("nan")}
    assert progress.row_note(row) == "loss task0 0.5 task1 0.25"
    assert progress.row_note({"test/acc_mean": 61.0, "test/acc_std": 8.104}) == "acc 61.00 std 8.10"


def test_bar_on_a_terminal_only(monkeypatch):
    class Tty:
        def isatty(self):
            return True

        def write(self, s):
            pass

        def flush(self):
            pass

    monkeypatch.delenv("FEDMOO_LOG_LEVEL", raising=False)
    assert isinstance(progress.open_bar(5, 0, "x", True), progress.Lines)   # pytest's capture
    monkeypatch.setattr(sys, "stderr", Tty())
    with progress.open_bar(5, 0, "x", True) as bar:
        assert not isinstance(bar, progress.Lines) and not bar.disable
    monkeypatch.setenv("FEDMOO_LOG_LEVEL", "error")
    with progress.open_bar(5, 0, "x", True) as bar:
        assert bar.disable


def test_quiet_run_prints_nothing_and_a_log_gets_round_lines(tmp_path):
    cli = cli_in(tmp_path)
    quiet = cli("-q", "run", "rounds=2", *TINY, "hydra.run.dir=a")
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = cli("run", "rounds=2", *TINY, "hydra.run.dir=b")
    assert loud.returncode == 0 and "\r" not in loud.stderr
    lines = [ln for ln in loud.stderr.splitlines() if "round" in ln]
    assert lines[0].startswith("fedmoo: fedavg on synthetic: round 1 of 2 (50%), ")
    assert lines[-1].startswith("fedmoo: fedavg on synthetic: round 2 of 2 (100%), ")
    assert "round 2 of 2" in (tmp_path / "b" / "fedmoo.log").read_text()


def test_basic_sweep_says_job_k_of_n(tmp_path):
    r = cli_in(tmp_path)("run", "-m", "seed=0,1", "rounds=1", "progress=false", *TINY,
                         "hydra.sweep.dir=sweep")
    assert r.returncode == 0, r.stderr
    said = [ln for ln in r.stderr.splitlines() if "job" in ln and "HYDRA" not in ln]
    assert said[0] == "fedmoo: job 1 of 2: seed=0"
    assert said[1].startswith("fedmoo: sweep: 1 of 2 jobs done, ") and "left" in said[1]
    assert said[2] == "fedmoo: job 2 of 2: seed=1"
    assert said[3].startswith("fedmoo: sweep: 2 of 2 jobs done, ") and "left" not in said[3]
    note = json.loads((tmp_path / "sweep" / ".fedmoo" / "sweep.json").read_text())
    assert note["jobs"] == 2 and note["swept"] == ["seed"]


@pytest.mark.slow
def test_lockstep_group_says_rounds_and_runs_finished(tmp_path):
    r = cli_in(tmp_path)("run", "-m", "hydra/launcher=lockstep", "seed=0,1", "rounds=2",
                         "engine=batched", *TINY, "hydra.sweep.dir=sweep",
                         env={"FEDMOO_PROGRESS_EVERY": "1000"})
    assert r.returncode == 0, r.stderr
    rounds = [ln for ln in r.stderr.splitlines() if "runs together" in ln]
    assert rounds[0].startswith("fedmoo: 2 runs together: round 1 of 2 (50%), ")
    assert rounds[0].endswith("; 0 of 2 runs finished")
    assert rounds[-1].startswith("fedmoo: 2 runs together: round 2 of 2 (100%), ")
    assert rounds[-1].endswith("; 2 of 2 runs finished")
    done = [ln for ln in r.stderr.splitlines() if "jobs done" in ln]   # they end together
    assert len(done) == 1 and done[0].startswith("fedmoo: sweep: 2 of 2 jobs done, ")
    assert "left" not in done[0]


def test_jobs_in_several_processes_count_once_each(tmp_path):
    """Two processes finish 15 jobs each at the same time: the count reaches 30 exactly."""
    sweeps.start(tmp_path, 30, ["seed"])
    code = ("import sys; from pathlib import Path; from fedmoo.run import sweeps\n"
            "for _ in range(15): sweeps.job_done(Path(sys.argv[1]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert (tmp_path / ".fedmoo" / "jobs-done").read_text() == "30"


def test_job_done_eta(tmp_path, caplog):
    sweeps.start(tmp_path, 4, [])
    start = json.loads((tmp_path / ".fedmoo" / "sweep.json").read_text())["start"]
    with caplog.at_level(logging.INFO, logger="fedmoo.run.sweeps"):
        assert sweeps.job_done(tmp_path, now=start + 30) == 1
        assert sweeps.job_done(tmp_path, now=start + 50) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "sweep: 1 of 4 jobs done, 30 s elapsed, about 1m30s left",
        "sweep: 2 of 4 jobs done, 50 s elapsed, about 50 s left"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fedmoo.run.sweeps"):
        assert sweeps.job_done(tmp_path, now=start + 60, count=2) == 4     # ended together
    assert [r.getMessage() for r in caplog.records] == ["sweep: 4 of 4 jobs done, 1m00s elapsed"]
    assert sweeps.job_done(tmp_path / "elsewhere") is None
