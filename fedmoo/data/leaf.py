"""LEAF's FEMNIST and Shakespeare (JSON files made by LEAF's preprocess.sh), natural clients.

Layout: ``data_dir/<root>/train/*.json`` and ``data_dir/<root>/test/*.json``; each file is
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``
(optionally ``hierarchies``). Files of a folder are merged; clients are the sorted user ids.
``num_samples`` is not trusted (LEAF's Shakespeare test files over-count it): sizes come from
the lists. LEAF data must be generated with LEAF's scripts (they need the raw NIST / Gutenberg
sources and a long preprocessing), so there is nothing to download here.

- FEMNIST: ``x`` = 784 floats in [0, 1] (28x28, white background), ``y`` = 0..61 (digits, upper,
  lower case).
- Shakespeare: ``x`` = an 80-character string, ``y`` = the next character; both encoded with
  LEAF's 80-character vocabulary. Samples with a character outside it are dropped. Tokens are
  stored as float32 indices (the model embeds ``x.long()``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fedmoo.data.cache import cached
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

LEAF_URL = "https://github.com/TalwalkarLab/leaf"
VOCAB = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ_LEN = 80
FEMNIST_CLASSES = [*"0123456789", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"abcdefghijklmnopqrstuvwxyz"]
RECIPES = {"femnist": "cd data/femnist && ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample",
           "shakespeare": "cd data/shakespeare && ./preprocess.sh -s niid --sf 0.2 -k 0 -tf 0.8 -t sample"}


def _json_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def read_split(folder: Path) -> dict[str, dict]:
    """Merge ``user_data`` of every JSON file in ``folder``."""
    out: dict[str, dict] = {}
    for path in _json_files(folder):
        try:
            blob = json.loads(path.read_text())
            users = blob["user_data"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise UserError(f"{path} is not a LEAF JSON file ({type(e).__name__}: {e}); "
                            "regenerate it with LEAF") from None
        for u, d in users.items():
            if len(d["x"]) != len(d["y"]):
                raise UserError(f"{path}: user {u} has {len(d['x'])} inputs but {len(d['y'])} "
                                "targets; regenerate the file")
            out[u] = d
    return out


def _check(dataset: str, root: Path) -> list[Path]:
    files = _json_files(root / "train") + _json_files(root / "test")
    if not _json_files(root / "train"):
        raise UserError(f"data={dataset}: no LEAF JSON files at {root / 'train'}; generate them "
                        f"with {LEAF_URL} ({RECIPES[dataset]}) and copy data/train and data/test "
                        f"into {root}")
    return files


def _federate(dataset: str, root: Path, users: list[str] | None, encode) -> Source:
    train, test = read_split(root / "train"), read_split(root / "test")
    names = sorted(train)
    if users is not None:
        missing = [u for u in users if u not in train]
        if missing:
            raise UserError(f"data.users: {missing[0]!r} is not a user of {root / 'train'} "
                            f"({len(train)} users there)")
        names = list(users)
    xs, ys, owners, flags = [], [], [], []
    for k, u in enumerate(names):
        for part, is_test in ((train.get(u), False), (test.get(u), True)):
            if not part:
                continue
            x, y = encode(part["x"], part["y"])
            xs.append(x)
            ys.append(y)
            owners.append(np.full(len(y), k, np.int64))
            flags.append(np.full(len(y), is_test))
    x = np.concatenate(xs)
    return Source(
        x=torch.from_numpy(x), y=torch.from_numpy(np.concatenate(ys)),
        is_test=torch.from_numpy(np.concatenate(flags)),
        owner=torch.from_numpy(np.concatenate(owners)),
        num_classes=len(FEMNIST_CLASSES) if dataset == "femnist" else len(VOCAB),
        input_shape=tuple(x.shape[1:]), client_names=names,
        class_names=FEMNIST_CLASSES if dataset == "femnist" else list(VOCAB),
    )


def _encode_femnist(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(x, dtype=np.float32)
    if xa.ndim != 2 or xa.shape[1] != 784:
        raise UserError(f"FEMNIST inputs must be 784 floats each, got shape {xa.shape}")
    return xa.reshape(-1, 1, 28, 28), np.asarray(y, dtype=np.int64)


_CODE = {c: i for i, c in enumerate(VOCAB)}


def _encode_shakespeare(x: list[str], y: list[str]) -> tuple[np.ndarray, np.ndarray]:
    keep = [i for i, (s, t) in enumerate(zip(x, y))
            if len(s) == SEQ_LEN and len(t) == 1 and t in _CODE and all(c in _CODE for c in s)]
    xa = np.array([[_CODE[c] for c in x[i]] for i in keep], dtype=np.float32).reshape(-1, SEQ_LEN)
    ya = np.array([_CODE[y[i]] for i in keep], dtype=np.int64)
    return xa, ya


def load_femnist(data_dir: Path, root: str = "femnist", users: list[str] | None = None) -> Source:
    path = data_dir / root
    files = _check("femnist", path)
    return cached(data_dir, "femnist", {"root": root, "users": users}, files,
                  lambda: _federate("femnist", path, users, _encode_femnist))


def load_shakespeare(data_dir: Path, root: str = "shakespeare",
                     users: list[str] | None = None) -> Source:
    path = data_dir / root
    files = _check("shakespeare", path)
    return cached(data_dir, "shakespeare", {"root": root, "users": users}, files,
                  lambda: _federate("shakespeare", path, users, _encode_shakespeare))
