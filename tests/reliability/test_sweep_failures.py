"""In a sweep, failing jobs do not stop the others, the sweep lists them, a re-run skips the
completed ones."""

from __future__ import annotations

import logging
import sys

import pytest

from fedmoo import cli as fcli
from fedmoo.run import callbacks, loop
from tests.inprocess import cli_in
from tests.reliability.helpers import SMALL, summary


@pytest.mark.slow
def test_sweep_goes_on_and_lists_failed_jobs(tmp_path):
    cli = cli_in(tmp_path)      # in-process: the CLI's main, its exit status and stderr
    # eval_split=val fails once its job has built its federation (no validation split); a value
    # a declaration refuses (algo.eta=0) refuses the whole sweep first: tests/test_schema.py
    args = ["run", "-m", *SMALL, "rounds=2", "eval_split=test,val", "algo.eta=1.0,1e12",
            "hydra.sweep.dir=sw"]
    r = cli(*args)
    assert r.returncode == 1, r.stderr
    sw = cli.cwd / "sw"
    assert [summary(sw / j)["status"] for j in "0123"] == ["completed", "diverged", "failed",
                                                            "failed"]
    assert summary(sw / "2")["message"].startswith("eval_split=val needs a validation split")
    err = r.stderr
    assert "sweep sw: 4 jobs: 1 completed, 1 diverged, 2 failed" in err
    assert "diverged job 1 (" in err and "algo.eta=1000000000000.0): training diverged" in err
    assert "failed job 2 (" in err and "eval_split=val algo.eta=1.0): eval_split=val needs" in err

    done = (sw / "0" / "rounds.csv").stat().st_mtime_ns
    r = cli(*args)  # the same sweep again: job 0 is not run a second time
    assert r.returncode == 1
    assert r.stdout.count("already completed") == 1
    assert (sw / "0" / "rounds.csv").stat().st_mtime_ns == done
    assert "recorded by an earlier run" in r.stderr


@pytest.fixture
def in_process_hydra(monkeypatch, tmp_path):
    """Run Hydra in this process; undo what it changes (argv, env, cwd, logging)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.setattr(sys, "argv", sys.argv[:])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "")
    monkeypatch.chdir(tmp_path)
    yield
    for h in root.handlers:
        if h not in handlers:
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.slow
def test_a_crashing_job_is_recorded_and_the_sweep_continues(tmp_path, monkeypatch,
                                                             in_process_hydra):
    real_run = loop.run

    def run(cfg, run_dir, record=None):  # a bug that hits only the job with seed=1
        if cfg["seed"] == 1:
            raise RuntimeError("bug in an algorithm")
        return real_run(cfg, run_dir, record)

    monkeypatch.setattr(loop, "run", run)
    code = fcli.main(["run", "-m", *SMALL, "rounds=1", "seed=0,1,2",
                      f"hydra.sweep.dir={tmp_path / 'sw'}"])
    assert code == 1
    statuses = [summary(tmp_path / "sw" / j)["status"] for j in "012"]
    assert statuses == ["completed", "failed", "completed"]
    bad = summary(tmp_path / "sw" / "1")
    assert bad["error"] == "internal" and bad["message"] == "RuntimeError: bug in an algorithm"
    assert "Traceback" in bad["traceback"] and "bug in an algorithm" in bad["traceback"]
    assert callbacks.failed_jobs(tmp_path / "sw") == [tmp_path / "sw" / "1"]


def test_job_outcomes_reads_each_job_summary(tmp_path):
    for job in ("0", "1", "a/b"):
        (tmp_path / job / ".hydra").mkdir(parents=True)
    (tmp_path / "1" / "summary.json").write_text('{"status": "diverged", "message": "m"}')
    (tmp_path / "a" / "b" / "summary.json").write_text('{"status": "completed"}')
    got = [(o[0].relative_to(tmp_path).as_posix(), o[1], o[2])
           for o in callbacks.job_outcomes(tmp_path)]
    assert got == [("0", "missing", "no summary.json: the job was killed or crashed"),
                   ("1", "diverged", "m"), ("a/b", "completed", "")]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "lockstep"])   # lockstep reports after training
def test_a_shared_job_directory_blames_the_refused_job_and_keeps_multirun_yaml(tmp_path,
                                                                                launcher):
    cli = cli_in(tmp_path)
    args = ["run", "-m", *SMALL, "rounds=2", "algo=fedavg,fedprox", "hydra.sweep.subdir=s${seed}",
            "hydra.sweep.dir=sw", f"hydra/launcher={launcher}"]
    r = cli(*args)
    assert r.returncode == 1
    sw = cli.cwd / "sw"
    assert summary(sw / "s0")["algo"] == "fedavg"       # the first job's result is kept
    err = r.stderr
    assert "sweep sw: 2 jobs: 1 completed, 1 refused" in err
    refused = next(line for line in err.splitlines() if "refused job s0" in line)
    assert "algo=fedprox" in refused and "algo=fedavg" not in refused
    assert "several jobs of this sweep used the directory s0" in err
    kept = (sw / "multirun.yaml").read_text()
    # the same directory for a sweep of another configuration: refused before any job runs,
    # naming the job, what differs and the folder that fixes it
    r = cli("run", "-m", *SMALL, "rounds=2", "algo=qfedavg", "hydra.sweep.subdir=s${seed}",
            "hydra.sweep.dir=sw")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert ("1 of 1 jobs of this sweep would land on results of another configuration in sw "
            "(jobs 0; job 0, s0/: algo.name: 'fedavg' -> 'qfedavg'): add hydra.sweep.dir=sw_2 "
            "to run this sweep in its own folder") in r.stderr
    assert (sw / "multirun.yaml").read_text() == kept
    assert summary(sw / "s0")["algo"] == "fedavg"


def test_a_second_sweep_in_a_busy_sweep_folder_is_refused(tmp_path):
    """Another process runs a sweep in sw/ (it holds sw/.fedmoo/sweep.lock): a sweep started
    there meanwhile is refused in one line naming it, before any job; once it ends, it runs."""
    import subprocess

    lock = tmp_path / "sw" / ".fedmoo" / "sweep.lock"
    lock.parent.mkdir(parents=True)
    hold = ("import sys, time; from pathlib import Path; from fedmoo.run.locks import try_lock; "
            "held = try_lock(Path(sys.argv[1])); print(held is not None, flush=True); "
            "time.sleep(120)")
    other = subprocess.Popen([sys.executable, "-c", hold, str(lock)], stdout=subprocess.PIPE,
                             text=True)
    cli = cli_in(tmp_path)
    args = ["run", "-m", *SMALL, "rounds=1", "seed=0,1", "hydra.sweep.dir=sw"]
    try:
        assert other.stdout.readline().strip() == "True"
        r = cli(*args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"hydra.sweep.dir=sw is in use by another sweep (pid {other.pid} on host" in r.stderr
        assert not {"0", "multirun.yaml"} & {p.name for p in (tmp_path / "sw").iterdir()}
    finally:
        other.kill()
        other.wait()
    assert cli(*args).returncode == 0
    assert (tmp_path / "sw" / "1" / "summary.json").is_file()
