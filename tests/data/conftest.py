"""Writers of tiny dataset files in the exact on-disk formats the real datasets use."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest


def idx_bytes(arr: np.ndarray) -> bytes:
    """IDX: 0, 0, dtype code 0x08 (ubyte), ndim; big-endian uint32 dims; row-major data."""
    arr = np.asarray(arr, dtype=np.uint8)
    head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return head + arr.tobytes()


def write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(arr)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def write_mnist_family(folder: Path, n_train=(2, 3, 4), n_test=(1, 1, 2), gz=False, prefix="",
                       size=28, seed=0):
    """Four IDX files; class c has n_train[c] train and n_test[c] test images. Returns arrays."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, counts, stem in (("train", n_train, "train"), ("test", n_test, "t10k")):
        y = np.repeat(np.arange(len(counts)), counts).astype(np.uint8)
        x = rng.integers(0, 256, (len(y), size, size), dtype=np.uint8)
        img_stem = f"{prefix}{stem if not prefix else split}-images-idx3-ubyte"
        lab_stem = f"{prefix}{stem if not prefix else split}-labels-idx1-ubyte"
        write_idx(folder / img_stem, x, gz)
        write_idx(folder / lab_stem, y, gz)
        out[split] = (x, y)
    return out


def write_cifar10(root: Path, rows: int = 2, seed: int = 0) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        d = {"batch_label": f"batch {i}", "labels": [(i + j) % 10 for j in range(rows)],
             "data": rng.integers(0, 256, (rows, 3072), dtype=np.uint8),
             "filenames": [f"img_{i}_{j}.png" for j in range(rows)]}
        with open(folder / name, "wb") as f:
            pickle.dump(d, f, protocol=2)
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"], "num_cases_per_batch": rows, "num_vis": 3072}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return folder


def write_cifar100(root: Path, rows: int = 3, seed: int = 0) -> Path:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", rows), ("test", 2)):
        d = {"batch_label": name, "fine_labels": [97 + j % 3 for j in range(n)],
             "coarse_labels": [j % 20 for j in range(n)],
             "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             "filenames": [f"{name}_{j}.png" for j in range(n)]}
        with open(folder / name, "wb") as f:
            pickle.dump(d, f, protocol=2)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)],
                     "coarse_label_names": [f"s{i}" for i in range(20)]}, f, protocol=2)
    return folder


def write_leaf(folder: Path, files: list[dict]) -> None:
    """One LEAF JSON file per entry of ``files``: {user: (x list, y list)} (+ num_samples)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, users in enumerate(files):
        blob = {"users": list(users), "num_samples": [len(v[1]) + 79 for v in users.values()],
                "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}
        (folder / f"all_data_{i}_niid_1_keep_0_train_9.json").write_text(json.dumps(blob))


@pytest.fixture(autouse=True)
def _own_cache_dirs(monkeypatch, tmp_path_factory):
    """Tests never read or write the user's dataset cache (FEDMOO_CACHE, ~/.cache/fedmoo)."""
    monkeypatch.delenv("FEDMOO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))


@pytest.fixture
def fmt():
    class Formats:
        pass

    ns = Formats()
    for fn in (idx_bytes, write_idx, write_mnist_family, write_cifar10, write_cifar100,
               write_leaf):
        setattr(ns, fn.__name__, staticmethod(fn))
    return ns
