"""Output nobody reads is no failure of the command: a closed stderr (``2>&-``), a reader that
left (``| head``); a full disk (``> /dev/full``) is one line, exit 2. Real processes: what
matters is the descriptors the shell gives them."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.reliability.helpers import SMALL, rows_without_time, summary

BUFFERED = {"PYTHONUNBUFFERED": ""}   # a user's default: stdout is written at exit or when full
FULL = ("fedmoo: error: cannot write standard output (No space left on device); what was "
        "printed is lost (the files the command wrote are not): send it elsewhere\n")


def _left():
    """The write end of a pipe whose reader has left."""
    r, w = os.pipe()
    os.close(r)
    return w


def test_a_closed_stderr_runs(cli):
    """`fedmoo run ... 2>&-` (sys.stderr is None) failed every run as an internal error."""
    r = cli("run", *SMALL, "rounds=2", "hydra.run.dir=out", stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.close(2))
    assert r.returncode == 0 and r.stdout.startswith("done: 2 rounds")
    assert summary(cli.cwd / "out")["status"] == "completed"
    assert len(rows_without_time(cli.cwd / "out" / "rounds.csv")) == 2


@pytest.mark.parametrize("unbuffered", ["", "1"])
@pytest.mark.parametrize("args", [["run", "--help"], ["table", "--help"], ["list"]])
def test_a_reader_that_left_is_no_error(cli, args, unbuffered):
    """`fedmoo run --help | head -0` ended with status 120 and Python's complaint."""
    w = _left()
    r = cli(*args, stdout=w, env={"PYTHONUNBUFFERED": unbuffered})
    os.close(w)
    assert (r.returncode, r.stderr) == (0, "")


def test_table_to_a_reader_that_left_or_a_full_disk(cli):
    assert cli("run", *SMALL, "rounds=1", "hydra.run.dir=out").returncode == 0
    w = _left()
    r = cli("table", "out", stdout=w, env=BUFFERED)
    os.close(w)
    assert (r.returncode, r.stderr) == (0, "")
    with open("/dev/full", "w") as full:
        r = cli("table", "out", stdout=full, env=BUFFERED)
    assert (r.returncode, r.stderr) == (2, FULL)


def test_a_sweep_whose_reader_left_completes(cli):
    """`fedmoo run -m ... | head -1`: each job's report failed as "Error executing job"."""
    w = _left()
    r = cli("run", "-m", *SMALL, "rounds=1", "seed=0,1", "hydra.sweep.dir=sw", stdout=w,
            env=BUFFERED)
    os.close(w)
    assert r.returncode == 0 and "rror" not in r.stderr, r.stderr
    assert [summary(cli.cwd / "sw" / j)["status"] for j in "01"] == ["completed"] * 2
