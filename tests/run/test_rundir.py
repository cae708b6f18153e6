"""One run per directory (a lock held for the run's life), and a refused re-run changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from fedmoo.run.rundir import RunDir, RunDirBusy
from tests.conftest import ROOT, small_cfg
from tests.inprocess import cli_in, run_main

FAST = ["progress=false", "num_clients=6", "clients_per_round=3", "data.num_users=6",
        "data.max_samples=100"]


def test_a_second_rundir_on_a_held_directory_is_refused(tmp_path):
    with RunDir(tmp_path, small_cfg()):
        with pytest.raises(RunDirBusy, match=rf"in use by another fedmoo run \(pid {os.getpid()} "
                                             r"on host .+ since \d{4}-"):
            RunDir(tmp_path, small_cfg()).__enter__()
    with RunDir(tmp_path, small_cfg()):   # released at the end of the block
        pass


@pytest.mark.slow
def test_two_processes_on_one_run_directory(cli, tmp_path):
    """A second `fedmoo run` on a directory a live run holds exits 2 naming the holder and
    writes nothing there; once the holder is killed (-9), a later run is not blocked. The holder
    is a real process (the lock is between processes); the other two run in this one."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDMOO_DATA": str(tmp_path / "data"),
           "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-m", "fedmoo", "run", *FAST, "rounds=1000000",
                              "checkpoint_every=0", "hydra.run.dir=r"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rows = tmp_path / "r" / "rounds.csv"
        deadline = time.monotonic() + 120
        while not rows.exists() and time.monotonic() < deadline:   # it is in its rounds
            time.sleep(0.2)
        assert rows.exists()

        def files():   # the holder's atomic writes leave a passing *.tmp: not the second run's
            return sorted(p.name for p in (tmp_path / "r").iterdir() if p.suffix != ".tmp")

        before = files()
        second = run_main(["run", *FAST, "rounds=2", "seed=7", "hydra.run.dir=r"], tmp_path)
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by another fedmoo run (pid {first.pid} on host" in lines[0]
        assert files() == before
        assert "summary.json" not in before               # the holder's directory is untouched
        assert "seed=7" not in (tmp_path / "r" / ".hydra" / "overrides.yaml").read_text()
    finally:
        first.kill()
        first.wait(timeout=30)
    third = run_main(["run", *FAST, "rounds=2", "resume=false", "hydra.run.dir=r"], tmp_path)
    assert third.returncode == 0, third.stderr
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_refused_rerun_keeps_the_record(tmp_path):
    cli = cli_in(tmp_path)
    assert cli("run", *FAST, "rounds=2", "hydra.run.dir=r").returncode == 0
    hydra = tmp_path / "r" / ".hydra"
    config, overrides = (hydra / "config.yaml").read_text(), (hydra / "overrides.yaml").read_text()
    summary = (tmp_path / "r" / "summary.json").read_text()
    bad = cli("run", *FAST, "rounds=2", "seed=5", "hydra.run.dir=r")
    assert bad.returncode == 2 and "another configuration (seed: 0 -> 5)" in bad.stderr
    assert (hydra / "config.yaml").read_text() == config
    assert (hydra / "overrides.yaml").read_text() == overrides
    assert yaml.safe_load(config)["seed"] == 0
    assert (tmp_path / "r" / "summary.json").read_text() == summary
    # a mistake caught before the run starts leaves the record alone too
    assert cli("run", *FAST, "rounds=2", "client.lr=-1", "hydra.run.dir=r").returncode == 2
    assert (hydra / "overrides.yaml").read_text() == overrides


@pytest.mark.slow
def test_sweep_with_refused_jobs_fails(tmp_path):
    cli = cli_in(tmp_path)
    assert cli("run", "-m", *FAST, "rounds=1", "seed=0,1", "hydra.sweep.dir=sw").returncode == 0
    again = cli("run", "-m", *FAST, "rounds=2", "seed=0,1", "hydra.sweep.dir=sw")
    assert again.returncode == 2    # refused before any job runs (fedmoo.cli.precheck)
    assert "2 of 2 jobs of this sweep would land on results of another configuration in sw " \
        "(jobs 0-1; job 0, 0/: rounds: 1 -> 2): add hydra.sweep.dir=sw_2" in again.stderr
    # the same sweep again (nothing refused) is fine: completed jobs are skipped
    assert cli("run", "-m", *FAST, "rounds=1", "seed=0,1", "hydra.sweep.dir=sw").returncode == 0


def test_a_completed_run_with_a_damaged_rounds_csv_runs_again(tmp_path):
    """Its rounds.csv cut mid-row (what `fedmoo table` leaves out as corrupt), the same command
    runs the job again, with one warning, instead of answering 'already completed'."""
    cli = cli_in(tmp_path)
    assert cli("run", *FAST, "rounds=2", "hydra.run.dir=r").returncode == 0
    rows = tmp_path / "r" / "rounds.csv"
    whole = rows.read_text()
    rows.write_text(whole[:-5])
    again = cli("run", *FAST, "rounds=2", "hydra.run.dir=r")
    assert again.returncode == 0 and "already completed" not in again.stdout
    assert "rounds.csv: its last line is cut mid-row" in again.stderr
    assert "running it again" in again.stderr
    columns = whole.splitlines()[0].split(",")
    kept = [i for i, c in enumerate(columns) if not c.startswith("time/")]
    strip = [[r.split(",")[i] for i in kept] for r in rows.read_text().splitlines()]
    assert strip == [[r.split(",")[i] for i in kept] for r in whole.splitlines()]
    assert "already completed" in cli("run", *FAST, "rounds=2", "hydra.run.dir=r").stdout
