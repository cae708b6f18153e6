"""Cache of preprocessed sources under ``data_dir/.fedmoo_cache`` (slow parsers only).

The cache key is the dataset name, the loader options and the size and modification time of every
raw file read, so editing or replacing a file rebuilds the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from collections.abc import Callable

import torch

from fedmoo.data.federated import Source

VERSION = 1


def _key(name: str, options: dict, files: list[Path]) -> str:
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(files)]
    blob = json.dumps([VERSION, name, options, stats], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def cached(data_dir: Path, name: str, options: dict, files: list[Path],
           build: Callable[[], Source]) -> Source:
    path = Path(data_dir) / ".fedmoo_cache" / f"{name}-{_key(name, options, files)}.pt"
    if path.exists():
        fields = torch.load(path, weights_only=True)
        fields["input_shape"] = tuple(fields["input_shape"])
        return Source(**fields)
    src = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({f.name: getattr(src, f.name) for f in dataclasses.fields(src)}, tmp)
    os.replace(tmp, path)
    return src
