"""threads=auto: one thread for small work, torch's default for large (a lockstep group keeps the
threads of a job alone); rows side by side (each_row) get torch's default either way."""

from __future__ import annotations

import pytest
import torch

from fedmoo.engine.cpu_layout import row_workers
from fedmoo.config import schema
from fedmoo.run import setup


@pytest.fixture(autouse=True)
def _restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_auto_threads_follow_the_work_size(monkeypatch):
    monkeypatch.setattr(setup, "free_cpus", lambda: 64)
    setup.set_threads("auto", setup.SMALL_MODEL - 1)
    assert torch.get_num_threads() == 1
    setup.set_threads("auto", setup.SMALL_MODEL)          # e.g. 7,850 parameters x 13 rows
    assert torch.get_num_threads() == setup._TORCH_THREADS
    setup.set_threads(1, 10**9)
    assert torch.get_num_threads() == 1
    assert schema.refusal("threads", 0) == ("threads=0 must be a positive integer or auto; "
                                            "e.g. threads=auto")   # refused before a run starts


def test_rows_side_by_side_use_the_default_count_under_auto(monkeypatch):
    """A small model keeps one intra-op thread, but its independent rows (FMGDA's per-task
    trainings) run on torch's default count under auto, and on ``threads`` when it is set."""
    monkeypatch.setattr(setup, "_TORCH_THREADS", 3)
    monkeypatch.setattr(setup, "free_cpus", lambda: 64)
    small, x = torch.nn.Linear(4, 2), torch.zeros(5, 4)
    setup.set_threads("auto", 100)
    assert torch.get_num_threads() == 1
    assert row_workers(small, x, 20) == 3 and row_workers(small, x, 2) == 2
    setup.set_threads(2, 100)
    assert torch.get_num_threads() == 2 and row_workers(small, x, 20) == 2
    setup.set_threads(1, 100)
    assert row_workers(small, x, 20) == 1


def test_auto_threads_leave_busy_cpus_alone(tmp_path, monkeypatch):
    """4 CPUs in the affinity mask; /proc/loadavg says 4 runnable tasks, this thread one of
    them: 3 others keep 3 CPUs busy, 1 is free. Nothing else running: all 4 (capped by
    torch's default count)."""
    loadavg = tmp_path / "loadavg"
    monkeypatch.setattr(setup, "LOADAVG", str(loadavg))
    monkeypatch.setattr(setup.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(setup, "_TORCH_THREADS", 4)
    loadavg.write_text("5.10 4.02 3.00 4/321 9999\n")
    assert setup.free_cpus() == 1
    setup.set_threads("auto", 10**7)
    assert torch.get_num_threads() == 1 and row_workers(torch.nn.Linear(4, 2),
                                                        torch.zeros(5, 4), 20) == 1
    loadavg.write_text("0.90 0.40 0.10 1/321 9999\n")
    assert setup.free_cpus() == 4
    setup.set_threads("auto", 10**7)
    assert torch.get_num_threads() == 4
    loadavg.write_text("20.0 9.0 3.0 40/321 9999\n")     # more work than CPUs: still one
    assert setup.free_cpus() == 1
    loadavg.unlink()                                        # no /proc: every CPU of the mask
    assert setup.free_cpus() == 4


def test_the_cli_makes_openmp_threads_sleep_when_idle():
    """`fedmoo` sets OMP_WAIT_POLICY=PASSIVE before torch loads (a user's setting wins)."""
    import subprocess
    import sys

    code = ("import os; os.environ.pop('OMP_WAIT_POLICY', None); import sys; "
            "import fedmoo.cli.main; print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["PASSIVE", "False"]
