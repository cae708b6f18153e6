"""How a CPU runs steps and evaluations over many samples (FMGDA's full local batches) quickly:
steps summed over cache-sized chunks (``step_chunk``), independent rows side by side on one
thread each (``each_row``), and a channels-last copy of a convolutional network whose blocks run
fedmoo's C kernel (``fast_layout``). Only the order of float sums changes
(tests/engine/test_tasks_fast.py: 1e-10 in float64); measured in docs/PERFORMANCE.md ("FMGDA on
MultiFashion").
"""

from __future__ import annotations

import copy
import ctypes
import functools
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedmoo.engine import native
from fedmoo.models.cnn import ConvPoolReLU

CPU_STEP_BYTES = 1 << 20    # input bytes per chunk (MultiFashion: 334 canvases)
ROW_THREADS_PARAMS = 100_000  # smaller models run rows side by side (as fedmoo.run's SMALL_MODEL)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3     # glibc's mallopt parameters (malloc.h)
_row_threads: int | None = None    # set by a run (fedmoo.run.setup.set_threads)


def step_chunk(x: Tensor) -> int | None:
    """Samples per forward (and backward) chunk when a CPU runs a step or an evaluation over many
    samples of ``x``: about ``CPU_STEP_BYTES`` of input, at least 64 samples. None on a GPU
    (a step takes its whole batch; evaluations keep ``eval_chunk``)."""
    if x.device.type != "cpu":
        return None
    return max(64, CPU_STEP_BYTES // max(1, math.prod(x.shape[1:]) * x.element_size()))


def set_row_threads(count: int | None) -> None:
    """The threads ``each_row`` may use (``row_workers``); None: torch's intra-op count. A run
    sets its ``threads``, and for ``threads=auto`` torch's default count even where it keeps one
    intra-op thread for a small model: rows side by side each run one thread and do not
    spin-wait for each other as OpenMP's threads inside one small operator do."""
    global _row_threads
    _row_threads = count


def row_threads() -> int:
    """The threads ``each_row`` may use: ``set_row_threads``'s count, else torch's."""
    return _row_threads or torch.get_num_threads()


def row_workers(model: nn.Module, x: Tensor, rows: int) -> int:
    """Threads ``each_row`` uses for ``rows`` independent passes of ``model`` on the samples
    ``x``: ``set_row_threads``'s count (at most one per row) for a small model on a CPU, else
    1 (a GPU, or a model of ``ROW_THREADS_PARAMS`` or more parameters: intra-op threads serve
    those well, and side by side each thread would hold its own activations)."""
    if x.device.type != "cpu" or sum(p.numel() for p in model.parameters()) >= ROW_THREADS_PARAMS:
        return 1
    return max(1, min(row_threads(), rows))


def worker_models(model: nn.Module, workers: int,
                  kept: list[nn.Module] | None = None) -> list[nn.Module]:
    """``model`` and ``workers - 1`` copies of it, one per ``each_row`` worker; ``kept`` (a list
    the caller holds) keeps the copies between calls and grows as needed."""
    kept = [] if kept is None else kept
    while len(kept) < workers - 1:
        kept.append(copy.deepcopy(model))
    return [model, *kept[: workers - 1]]


def each_row(count: int, workers: int, run: Callable[[int, int], None]) -> None:
    """``run(worker, row)`` for rows ``0 .. count - 1``, handed out in order to ``workers``
    threads that each run one intra-op thread (torch's count is restored afterwards). Every row
    is computed exactly as in a plain loop, so the numbers do not depend on ``workers``;
    ``run`` must touch only its worker's model and its row's outputs."""
    if workers <= 1:
        for r in range(count):
            run(0, r)
        return
    threads, lock, rows = torch.get_num_threads(), threading.Lock(), iter(range(count))

    def work(k: int) -> None:
        torch.set_num_threads(1)
        while True:
            with lock:
                r = next(rows, None)
            if r is None:
                return
            run(k, r)

    try:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(work, range(workers)))
    finally:
        torch.set_num_threads(threads)


class RowConv2d(nn.Conv2d):
    """A stride-1, undilated convolution of a one-channel image computed as a ``kh``-channel
    ``1 x kw`` convolution over the ``kh`` row-shifted copies of the image:
    ``sum_{p,q} w[o, 0, p, q] x[i+p, j+q] = sum_p sum_q w[o, p, 0, q] x_p[i, j+q]`` with
    ``x_p[i, :] = x[i+p, :]``. Same parameters as the ``nn.Conv2d`` it replaces; oneDNN's kernels
    for one input channel are slow (MultiLeNet's first layer: 3x cheaper this way)."""

    @staticmethod
    def applies(m: nn.Module) -> bool:
        return type(m) is nn.Conv2d and RowConv2d.fits(m)

    @staticmethod
    def fits(m: nn.Conv2d) -> bool:
        return (m.in_channels == 1 and m.groups == 1 and m.stride == (1, 1)
                and m.dilation == (1, 1) and m.padding_mode == "zeros"
                and not isinstance(m.padding, str) and m.kernel_size[0] > 1)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:                      # an unbatched image: the plain convolution
            return super().forward(x)
        kh, kw = self.kernel_size
        ph, pw = self.padding
        if ph or pw:
            x = F.pad(x, (pw, pw, ph, ph))
        rows = x[:, 0].unfold(1, kh, 1).permute(0, 3, 1, 2)       # [N, kh, H - kh + 1, W]
        rows = rows.contiguous(memory_format=torch.channels_last)
        weight = self.weight.reshape(self.out_channels, kh, 1, kw)
        return F.conv2d(rows, weight, self.bias)


class FastConvPoolReLU(ConvPoolReLU):
    """A ``ConvPoolReLU`` run by fedmoo's C kernel (``fedmoo.engine.native``) where it fits,
    else by torch's operators, its convolution a ``RowConv2d`` when it has one input channel."""

    def forward(self, x: Tensor) -> Tensor:
        if native.fits(self, x):
            return native.conv_pool_relu(self, x)
        conv = RowConv2d.forward if RowConv2d.fits(self) else nn.Conv2d.forward
        return F.relu(F.max_pool2d(conv(self, x), 2))


@functools.cache
def retain_freed_memory() -> None:
    """Once per process: glibc serves blocks up to 32 MB from its heap and never trims the heap
    below 1 GB of free memory, so the chunks' activations reuse memory instead of page-faulting
    fresh pages (10-25% of a MultiLeNet full-batch step's CPU time on the 2-core VM). No effect
    on any number; a no-op where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt      # the C library the interpreter runs on
    except (OSError, AttributeError):
        return
    mallopt(M_TRIM_THRESHOLD, 1 << 30)
    mallopt(M_MMAP_THRESHOLD, 1 << 25)


def fast_layout(model: nn.Module, x: Tensor) -> nn.Module:
    """The model to run on images ``x`` on a CPU: a channels-last copy of a network with 2-d
    convolutions, its ``RowConv2d``-able convolutions swapped (the same Parameter objects under
    the same names), else ``model`` itself. Flat parameter vectors travel unchanged
    (``fedmoo.params`` reads and writes logical order)."""
    if x.device.type != "cpu" or x.dim() != 4 or \
            not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        return model
    retain_freed_memory()
    fast = copy.deepcopy(model).to(memory_format=torch.channels_last)
    for m in fast.modules():
        if type(m) is ConvPoolReLU:
            m.__class__ = FastConvPoolReLU
        elif RowConv2d.applies(m):
            m.__class__ = RowConv2d
    return fast
