"""LEAF's FEMNIST and Shakespeare (JSON files made by LEAF's preprocess.sh), natural clients.

``data_dir/<root>/{train,test}/*.json``, each ``{"users": [...], "num_samples": [...],
"user_data": {user: {"x": [...], "y": [...]}}}``; the files of a folder are merged, clients are
the sorted user ids and sizes come from the lists (LEAF's Shakespeare test files over-count
``num_samples``). FEMNIST: ``x`` = 784 floats in [0, 1], ``y`` = 0..61. Shakespeare: 80
characters and the next one, as float32 indices into LEAF's 80-character vocabulary (samples
with another character are dropped). A damaged file is a UserError naming the file and user.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedmoo.data.cache import cached
from fedmoo.data.checks import reason
from fedmoo.data.federated import Source
from fedmoo.data.mnist import EMNIST_BYCLASS as FEMNIST_CLASSES
from fedmoo.errors import UserError

LEAF_URL = "https://github.com/TalwalkarLab/leaf"
VOCAB = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ_LEN = 80
RECIPES = {"femnist": "cd data/femnist && ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample",
           "shakespeare": "cd data/shakespeare && ./preprocess.sh -s niid --sf 0.2 -k 0 -tf 0.8 -t sample"}


def _json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []


def _bad(path: Path, what: str) -> UserError:
    return UserError(f"{path}: {what}; regenerate it with LEAF ({LEAF_URL})")


def _read_file(path: Path) -> dict[str, dict]:
    """``user_data`` of one LEAF JSON file, each user's ``x`` and ``y`` checked to be lists of
    the same length."""
    try:
        blob = json.loads(path.read_bytes())
    except OSError as e:
        raise _bad(path, f"cannot be read ({reason(e)})") from None
    except UnicodeDecodeError as e:
        raise _bad(path, f"byte {e.start} is not UTF-8 text") from None
    except (ValueError, RecursionError) as e:     # (an integer of over 4,300 digits: ValueError)
        raise _bad(path, f"not a LEAF JSON file ({reason(e)})") from None
    users = blob.get("user_data") if isinstance(blob, dict) else None
    if not isinstance(users, dict):
        raise _bad(path, "not a LEAF JSON file (no 'user_data' object)")
    if not users:
        raise _bad(path, "no users in 'user_data'")
    for u, d in users.items():
        if not isinstance(d, dict) or not isinstance(d.get("x"), list) \
                or not isinstance(d.get("y"), list):
            raise _bad(path, f"user {u} has no 'x' and 'y' lists")
        if len(d["x"]) != len(d["y"]):
            raise _bad(path, f"user {u} has {len(d['x'])} inputs but {len(d['y'])} targets")
    return users


def _federate(root: Path, users: list[str] | None, encode, classes: list[str]) -> Source:
    train, test = {}, {}
    for split, found in (("train", train), ("test", test)):
        for path in _json_files(root / split):
            for u, d in _read_file(path).items():
                if u in found:              # (two LEAF runs in one folder: the last one won)
                    raise UserError(f"{path}: user {u} is also in {found[u][0].name}; keep "
                                    "the files of one LEAF run in the folder")
                found[u] = (path, d)
    names = sorted(train)
    if users is not None:
        missing = [u for u in users if u not in train]
        if missing:
            raise UserError(f"data.users: {missing[0]!r} is not a user of {root / 'train'} "
                            f"({len(train)} users there)")
        names = list(users)
    xs, ys, owners, flags = [], [], [], []
    for k, u in enumerate(names):
        for split, is_test in ((train, False), (test, True)):
            if u not in split:
                continue
            path, part = split[u]
            if not part["y"]:
                if is_test:
                    continue                       # a user may have no test samples
                raise _bad(path, f"user {u} has no training samples")
            try:
                x, y = encode(part["x"], part["y"])
            except (ValueError, TypeError, OverflowError) as e:
                raise _bad(path, f"user {u}: {reason(e)}") from None
            xs.append(x)
            ys.append(y)
            owners.append(np.full(len(y), k, np.int64))
            flags.append(np.full(len(y), is_test))
    x = np.concatenate(xs)
    return Source(
        x=x, y=np.concatenate(ys), is_test=np.concatenate(flags), owner=np.concatenate(owners),
        num_classes=len(classes), input_shape=tuple(x.shape[1:]), client_names=names,
        class_names=classes,
    )


def _encode_femnist(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    """ValueError / TypeError when ``x`` is not 784 numbers per sample or ``y`` not 0..61."""
    xa = np.asarray(x, dtype=np.float32)
    if xa.ndim != 2 or xa.shape[1] != 784:
        raise ValueError(f"FEMNIST inputs must be 784 numbers each, got shape {xa.shape}")
    if not np.isfinite(xa).all():
        raise ValueError("FEMNIST inputs must be finite numbers")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in y):
        raise ValueError("FEMNIST targets must be integers")
    ya = np.asarray(y, dtype=np.int64)
    bad = np.flatnonzero((ya < 0) | (ya >= len(FEMNIST_CLASSES)))
    if len(bad):
        raise ValueError(f"label {ya[bad[0]]} of sample {bad[0]} is outside "
                         f"0..{len(FEMNIST_CLASSES) - 1}")
    return xa.reshape(-1, 1, 28, 28), ya


_CODE = {c: i for i, c in enumerate(VOCAB)}


def _encode_shakespeare(x: list[str], y: list[str]) -> tuple[np.ndarray, np.ndarray]:
    if not all(isinstance(s, str) for s in x) or not all(isinstance(t, str) for t in y):
        raise ValueError("Shakespeare inputs and targets must be strings")
    keep = [i for i, (s, t) in enumerate(zip(x, y))
            if len(s) == SEQ_LEN and len(t) == 1 and t in _CODE and all(c in _CODE for c in s)]
    xa = np.array([[_CODE[c] for c in x[i]] for i in keep], dtype=np.float32).reshape(-1, SEQ_LEN)
    ya = np.array([_CODE[y[i]] for i in keep], dtype=np.int64)
    return xa, ya


def _load(dataset: str, encode, classes: list[str], data_dir: Path, root: str,
          users: list[str] | None) -> Source:
    path = data_dir / root
    if not (train := _json_files(path / "train")):
        raise UserError(f"data={dataset}: no LEAF JSON files at {path / 'train'}; generate them "
                        f"with {LEAF_URL} ({RECIPES[dataset]}) and copy data/train and data/test "
                        f"into {path}")
    return cached(data_dir, dataset, {"root": root, "users": users},
                  train + _json_files(path / "test"),
                  lambda: _federate(path, users, encode, classes))


def load_femnist(data_dir: Path, *, root: str, users: list[str] | None) -> Source:
    return _load("femnist", _encode_femnist, FEMNIST_CLASSES, data_dir, root, users)


def load_shakespeare(data_dir: Path, *, root: str, users: list[str] | None) -> Source:
    return _load("shakespeare", _encode_shakespeare, list(VOCAB), data_dir, root, users)
