"""The reliability tests train tiny models: one torch thread is much faster than several
threads fighting over a busy machine's cores (subprocesses get OMP_NUM_THREADS=1 the same way)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
