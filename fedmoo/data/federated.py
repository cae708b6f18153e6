"""The federated dataset: a ``Source`` is what a loader returns (every sample, its official
train/test flag and, for naturally federated data, its owner); ``FederatedData`` holds the
partition's per-client train / val / test index sets in CSR form (one index tensor + offsets),
so evaluating all clients is a few big passes."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

# Tasks whose samples carry one target per objective: ``y [M, S]`` and models returning
# ``[B, S, C]`` logits (classification per task) or ``[B, S, 1]`` / ``[B, S]`` (regression).
MULTITASK = ("multitask", "multitask_regression")


@dataclass
class Source:
    """What a loader returns; its arrays may be given as numpy arrays (held as tensors)."""

    x: Tensor                      # [M, ...] float32 features (already normalised)
    y: Tensor                      # [M] int64 labels (or [M, S] targets)
    is_test: Tensor                # [M] bool, the dataset's own test split
    num_classes: int
    input_shape: tuple[int, ...]
    owner: Tensor | None = None    # [M] int64 natural client of each sample (LEAF users, ...)
    client_names: list[str] | None = None
    class_names: list[str] | None = None
    task: str = "classification"
    task_names: list[str] | None = None   # multi-task data: one name per column of y
    location: str | None = None    # where the samples come from when that is not data_dir
    #                                (a system folder, "memory (generated, no files)"); messages only

    def __post_init__(self):
        for name in ("x", "y", "is_test", "owner"):
            if isinstance(value := getattr(self, name), np.ndarray):
                setattr(self, name, torch.from_numpy(value))

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the samples, their labels (targets), test flags and owners, made once per
        source object (a sweep that shares a source hashes it once; sources are never changed
        in place)."""
        return tensors_digest(self.x, self.y, self.is_test, self.owner)


def tensors_digest(*tensors: Tensor | None) -> str:
    """sha256 over the dtype, shape and bytes of each tensor (None counts as a marker)."""
    h = hashlib.sha256()
    for t in tensors:
        if t is None:
            h.update(b"none;")
            continue
        a = np.ascontiguousarray(t.detach().cpu().numpy())
        h.update(f"{a.dtype}{a.shape};".encode())
        h.update(a.reshape(-1).view(np.uint8))
    return h.hexdigest()


@dataclass
class ClientSplit:
    """Per-client index sets in CSR form: client k owns ``index[offsets[k]:offsets[k+1]]``."""

    index: Tensor    # [M_s] int64 indices into the sample tensors
    offsets: Tensor  # [N + 1] int64

    @classmethod
    def from_lists(cls, parts: list[np.ndarray]) -> "ClientSplit":
        sizes = np.array([len(p) for p in parts], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        index = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
        return cls(torch.from_numpy(index), torch.from_numpy(offsets))

    @property
    def num_clients(self) -> int:
        return int(self.offsets.numel() - 1)

    @property
    def sizes(self) -> Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    def of(self, k: int) -> Tensor:
        return self.index[int(self.offsets[k]) : int(self.offsets[k + 1])]

    def owner(self) -> Tensor:
        """Client id of every entry of ``index``."""
        return torch.repeat_interleave(
            torch.arange(self.num_clients, device=self.offsets.device), self.sizes
        )

    def to(self, device) -> "ClientSplit":
        return ClientSplit(self.index.to(device), self.offsets.to(device))

    @functools.cached_property
    def digest(self) -> bytes:
        """A digest of the index sets (made once): runs whose splits have equal digests hold
        the same clients (a lockstep group shares their minibatch plans and evaluations)."""
        h = hashlib.sha256(self.offsets.cpu().numpy().tobytes())
        h.update(self.index.cpu().numpy().tobytes())
        return h.digest()


@dataclass
class FederatedData:
    x: Tensor
    y: Tensor
    train: ClientSplit
    test: ClientSplit
    val: ClientSplit | None
    num_classes: int
    input_shape: tuple[int, ...]
    task: str = "classification"
    client_names: list[str] | None = None
    class_names: list[str] | None = None
    task_mask: Tensor | None = None       # [N, S] bool objective indicator (multi-task data)
    task_names: list[str] | None = None
    source_digest: str | None = None      # Source.digest of the samples it was federated from

    def digest(self) -> str:
        """What a run trains and is evaluated on: the samples and labels (the source's digest,
        or this federation's own tensors when it was built by hand), every client's index sets
        and the objective indicator. A checkpoint records it; a resume on other data is refused."""
        h = hashlib.sha256((self.source_digest or tensors_digest(self.x, self.y)).encode())
        for s in (self.train, self.val, self.test):
            h.update(b"-" if s is None else s.digest)
        h.update(tensors_digest(self.task_mask).encode())
        return h.hexdigest()

    @property
    def num_clients(self) -> int:
        return self.train.num_clients

    @property
    def num_tasks(self) -> int:
        """S for multi-task data (``y [M, S]``), 0 for single-task data."""
        return int(self.y.shape[1]) if self.task in MULTITASK else 0

    def split(self, name: str) -> ClientSplit:
        s = getattr(self, name)
        if s is None:
            raise ValueError(f"this federation has no {name!r} split")
        return s

    def to(self, device) -> "FederatedData":
        return dataclasses.replace(
            self, x=self.x.to(device), y=self.y.to(device), train=self.train.to(device),
            test=self.test.to(device), val=None if self.val is None else self.val.to(device),
            task_mask=None if self.task_mask is None else self.task_mask.to(device))

    def save_partition(self, path) -> None:
        """Write the client index sets to ``path`` (.npz) so a run's federation is on record."""
        arrays = {f"{name}_{part}": getattr(s, part).cpu().numpy()
                  for name in ("train", "val", "test") if (s := getattr(self, name)) is not None
                  for part in ("index", "offsets")}
        if self.task_mask is not None:
            arrays["task_mask"] = self.task_mask.cpu().numpy()
        # uncompressed: zlib took 50-70 ms a run (Adult's 48k indices), which a lockstep sweep
        # of 100 runs pays at start; the file is a record, not an archive
        np.savez(path, **arrays)
