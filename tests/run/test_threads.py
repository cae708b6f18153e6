"""threads=auto: one thread for small work, torch's default for large (a lockstep group counts
its model times its rows)."""

from __future__ import annotations

import pytest
import torch

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
