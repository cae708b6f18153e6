"""Pieces both engines share, so they train on exactly the same batches with the same math."""

from __future__ import annotations

import contextlib
import math
import threading
import weakref

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedmoo.data.federated import MULTITASK

CPU_CHUNK_BYTES = 8 << 20   # input bytes per evaluation chunk on the CPU: the chunk stays in cache
CUDA_CHUNK = 8192           # samples per evaluation chunk on a GPU


@contextlib.contextmanager
def entrywise(n: int, device: torch.device):
    """Products of ``n`` stacked entries computed as one thread computes each entry: MKL gives
    each of several entries to one thread but splits a lone product's sum across threads (other
    bits; batches of 2-40 on 1-4 threads: scripts/batch_invariance.py), so a lone entry runs on
    one thread and a row's numbers do not depend on how many rows take the step with it."""
    threads = torch.get_num_threads()
    if n != 1 or threads == 1 or device.type != "cpu":
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def eval_chunk(x: Tensor) -> int:
    """Samples per forward pass when evaluating many samples of ``x`` at once."""
    if x.device.type == "cuda":
        return CUDA_CHUNK
    return max(64, CPU_CHUNK_BYTES // max(1, math.prod(x.shape[1:]) * x.element_size()))


def round_seed(seed: int, round_idx: int, *more: int) -> int:
    """A 63-bit seed for everything random in round ``round_idx`` of a run seeded ``seed`` (and
    ``more``: a Flower client's index): each round is reproducible on its own (exact resume,
    engine equivalence)."""
    keys = [int(k) for k in (seed, round_idx, *more)]
    return int(np.random.SeedSequence(keys).generate_state(1, np.uint64)[0] >> np.uint64(1))


def seed_torch(seed: int, device: torch.device) -> None:
    """``torch.manual_seed(seed)`` for the CPU generator, and CUDA's for a run on CUDA
    (``torch.manual_seed`` also queues the seed for uninitialised CUDA, XPU and MTIA, formatting
    a stack trace for each: 0.2-0.8 ms a round)."""
    torch.default_generator.manual_seed(int(seed))
    if device.type == "cuda":
        torch.cuda.manual_seed_all(int(seed))


def sample_losses(out: Tensor, y: Tensor, task: str) -> Tensor:
    """Per-sample loss ``[B]``: cross-entropy for classification, MSE for regression; ``[B, S]``
    on multi-task data (``y [B, S]``, ``out [B, S, C]`` or ``[B, S(, 1)]``)."""
    if task == "classification":
        return F.cross_entropy(out, y, reduction="none")
    if task == "multitask":
        return F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
    if task == "multitask_regression":
        return (out.reshape(y.shape) - y.to(out.dtype)).square()
    return F.mse_loss(out, y.to(out.dtype), reduction="none").flatten(1).mean(1)


def sample_correct(out: Tensor, y: Tensor, task: str) -> Tensor:
    """1.0 where the prediction is right: ``[B]``, or ``[B, S]`` for multi-task data (0 for
    regression)."""
    if task == "classification":
        return (out.argmax(dim=1) == y).to(out.dtype)
    if task == "multitask":
        return (out.argmax(dim=-1) == y).to(out.dtype)
    shape = y.shape if task == "multitask_regression" else (out.shape[0],)
    return torch.zeros(shape, dtype=out.dtype, device=out.device)


def objective_losses(out: Tensor, y: Tensor, task: str, task_weights: Tensor | None = None) -> Tensor:
    """Per-sample training loss ``[B]``. On multi-task data: ``sum_s task_weights[s] loss_s``
    (``[S]``; a one-hot vector trains one task), by default the mean over the S tasks."""
    losses = sample_losses(out, y, task)
    if losses.dim() == 1:
        return losses
    return losses.mean(-1) if task_weights is None else (losses * task_weights).sum(-1)


@torch.no_grad()
def forward_stats(model: nn.Module, x: Tensor, y: Tensor, idx: Tensor, task: str,
                  chunk: int | None = None, targets: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-sample loss and correctness of ``model`` on samples ``idx`` (eval mode, no grad):
    ``[n]`` each, or ``[n, S]`` on multi-task data. ``targets`` (aligned with ``idx``) replaces
    the labels ``y[idx]`` (relabelled clients)."""
    was_training = model.training
    model.eval()
    chunk = chunk or eval_chunk(x)
    losses, correct = [], []
    for s in range(0, idx.numel(), chunk):
        b = idx[s : s + chunk]
        yb = gather(y, b) if targets is None else targets[s : s + chunk]
        out = model(gather(x, b))
        losses.append(sample_losses(out, yb, task))
        correct.append(sample_correct(out, yb, task))
    model.train(was_training)
    if not losses:
        z = torch.zeros(0, *y.shape[1:] if task in MULTITASK else (), device=x.device)
        return z, z
    return torch.cat(losses), torch.cat(correct)


def gather(t: Tensor, idx: Tensor) -> Tensor:
    """``t[idx]`` for an integer index of any shape, as one ``index_select`` (on the CPU several
    times faster than advanced indexing for images); inside ``sharing_gathers`` a large gather
    of the same rows of the same tensor returns the copy made already."""
    if _gathers is not None and idx.numel() * math.prod(t.shape[1:]) * t.element_size() >= \
            SHARE_BYTES and threading.current_thread() is threading.main_thread():
        return _gathers.get(t, idx)
    return t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


# Gathers of at least this size are kept while ``sharing_gathers`` is on (smaller ones are
# cheaper to make again than to look up), up to GATHERS_KEPT bytes in all, the oldest dropped.
SHARE_BYTES = 1 << 20
GATHERS_KEPT = 512 << 20


class _Gathers:
    """The large gathers made in a lockstep group, newest last: the runs of one seed read the
    same samples, and one copy gives every run its own bits. An entry whose copy was modified
    in place (its version moved) is made again."""

    def __init__(self) -> None:
        self.entries: dict[tuple, tuple[weakref.ref, Tensor, Tensor, int]] = {}
        self.size = 0

    def get(self, t: Tensor, idx: Tensor) -> Tensor:
        key = (id(t), t._version, t.device, tuple(idx.shape), int(idx.sum()))
        hit = self.entries.pop(key, None)
        # the source itself (a freed tensor's id can be reused: a weak reference tells), its
        # copy unmodified, the same rows
        if hit is not None and hit[0]() is t and hit[3] == hit[2]._version and \
                torch.equal(hit[1], idx):
            self.entries[key] = hit
            return hit[2]
        if hit is not None:
            self.size -= hit[2].numel() * hit[2].element_size()
        out = t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])
        self.entries[key] = (weakref.ref(t), idx.clone(), out, out._version)
        self.size += out.numel() * out.element_size()
        while self.size > GATHERS_KEPT and len(self.entries) > 1:
            old = self.entries.pop(next(iter(self.entries)))[2]
            self.size -= old.numel() * old.element_size()
        return out


_gathers: _Gathers | None = None


@contextlib.contextmanager
def sharing_gathers():
    """Within the block, ``gather`` keeps its large copies and hands the same copy to a later
    gather of the same rows (fedmoo.run.group: a lockstep group's runs)."""
    global _gathers
    outer = _gathers
    _gathers = _Gathers() if outer is None else outer
    try:
        yield
    finally:
        _gathers = outer


def relabel(label_map: Tensor | None, y: Tensor) -> Tensor:
    """``label_map[y]`` for one client's ``[C]`` map, ``label_map.gather(1, y)`` for a ``[K, C]``
    map and ``[K, B]`` labels; ``y`` unchanged when there is no map."""
    if label_map is None:
        return y
    return label_map[y] if label_map.dim() == 1 else label_map.gather(1, y)


def batch_layout(n: int, batch_size: int | None, epochs: int, local_steps: int | None,
                 gen: torch.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The local minibatches of one client: (positions into its sample list, all batches one
    after the other; each batch's length; each batch's epoch). Each epoch is a fresh permutation
    from ``gen`` cut into batches of ``batch_size`` (the last may be short; ``None``: full
    batch); with ``local_steps``, exactly that many steps over as many epochs as needed."""
    b = n if not batch_size or batch_size <= 0 or batch_size > n else int(batch_size)
    per_epoch = -(-n // b)
    if local_steps is None:
        n_epochs = max(1, int(epochs))
        steps = per_epoch * n_epochs
    else:
        steps = max(1, int(local_steps))
        n_epochs = -(-steps // per_epoch)
    perms = np.concatenate([torch.randperm(n, generator=gen).numpy() for _ in range(n_epochs)])
    one_epoch = np.full(per_epoch, b, dtype=np.int64)
    one_epoch[-1] = n - b * (per_epoch - 1)
    lens = np.tile(one_epoch, n_epochs)[:steps]
    epoch = np.repeat(np.arange(n_epochs), per_epoch)[:steps]
    return perms[: int(lens.sum())], lens, epoch


def client_batches(n: int, batch_size: int | None, epochs: int, local_steps: int | None,
                   gen: torch.Generator) -> list[tuple[int, Tensor]]:
    """``batch_layout`` as a list of (epoch, positions of the batch)."""
    pos, lens, epoch = batch_layout(n, batch_size, epochs, local_steps, gen)
    pos = torch.from_numpy(pos)
    ends = np.cumsum(lens)
    return [(int(e), pos[end - size: end]) for e, size, end in zip(epoch, lens, ends)]


def param_views(model: nn.Module, flat: Tensor) -> list[Tensor]:
    """Views of a flat ``[d]`` vector shaped like the model's trainable parameters."""
    views, off = [], 0
    for p in model.parameters():
        if p.requires_grad:
            views.append(flat[off : off + p.numel()].view_as(p))
            off += p.numel()
    return views

