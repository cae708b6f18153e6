"""threads=auto: one thread for small work, torch's default for large (a lockstep group with
hydra.launcher.invariant=false counts its model times its rows; by default a group keeps the
threads of a job alone); rows side by side (each_row) get torch's default either way."""

from __future__ import annotations

import pytest
import torch

from fedmoo.engine.cpu_layout import row_workers
from fedmoo.errors import UserError
from fedmoo.run import setup


@pytest.fixture(autouse=True)
def _restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_auto_threads_follow_the_work_size():
    setup.set_threads("auto", setup.SMALL_MODEL - 1)
    assert torch.get_num_threads() == 1
    setup.set_threads("auto", setup.SMALL_MODEL)          # e.g. 7,850 parameters x 13 rows
    assert torch.get_num_threads() == setup._TORCH_THREADS
    setup.set_threads(1, 10**9)
    assert torch.get_num_threads() == 1
    with pytest.raises(UserError, match="threads=0 must be a positive integer or auto"):
        setup.set_threads(0, 10)


def test_rows_side_by_side_use_the_default_count_under_auto(monkeypatch):
    """A small model keeps one intra-op thread, but its independent rows (FMGDA's per-task
    trainings) run on torch's default count under auto, and on ``threads`` when it is set."""
    monkeypatch.setattr(setup, "_TORCH_THREADS", 3)
    small, x = torch.nn.Linear(4, 2), torch.zeros(5, 4)
    setup.set_threads("auto", 100)
    assert torch.get_num_threads() == 1
    assert row_workers(small, x, 20) == 3 and row_workers(small, x, 2) == 2
    setup.set_threads(2, 100)
    assert torch.get_num_threads() == 2 and row_workers(small, x, 20) == 2
    setup.set_threads(1, 100)
    assert row_workers(small, x, 20) == 1
