"""Cache of preprocessed sources (LEAF JSON, CelebA, image folders, MNIST, Fashion-MNIST).

An entry is keyed on the code that builds it (this package's modules: another fedmoo's entries
are not read), the dataset, the loader options and the path and SHA-256 of every raw file read
(a file rewritten with its old size and time rebuilds it; hashing MNIST's 55 MB takes 29 ms,
parsing it 1.3 s; the files are hashed again after a build, and one that changed meanwhile is a
UserError), and holds the digest of its own content, checked when it is read (an entry
changed after it was written is rebuilt). Folders, in order: ``FEDMOO_CACHE`` when set, else
``data_dir/.fedmoo_cache`` and ``$XDG_CACHE_HOME/fedmoo`` (``~/.cache/fedmoo``): read from the
first holding the entry, written (atomically) to the first that takes it, else the run goes on
uncached after a warning; an unreadable entry is rebuilt after a warning.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

from fedmoo.data.checks import reason
from fedmoo.data.download import md5sum
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

log = logging.getLogger(__name__)


@functools.cache
def code_digest() -> str:
    """SHA-256 of the modules of fedmoo.data, which build the entries (a loader, a constant or
    the normalisation changed by another fedmoo would otherwise be served from its entries)."""
    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.read_bytes())
    return h.hexdigest()


def content_digest(src: Source) -> str:
    """The digest of an entry's content: its tensors' and its other fields'."""
    other = {f.name: getattr(src, f.name) for f in dataclasses.fields(src)
             if not isinstance(getattr(src, f.name), torch.Tensor)}
    return hashlib.sha256(f"{src.digest} {json.dumps(other, default=str)}".encode()).hexdigest()


def _hashes(files: list[Path]) -> list[tuple[str, str | None]]:
    contents = []
    for p in sorted(files):
        try:
            contents.append((str(p), md5sum(p, "sha256")))
        except OSError:       # unreadable: the loader's build then reports it by name
            contents.append((str(p), None))
    return contents


def _key(name: str, options: dict, contents: list[tuple[str, str | None]]) -> str:
    blob = json.dumps([code_digest(), name, options, contents], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def user_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/fedmoo`` or ``~/.cache/fedmoo`` (None without a home folder)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = Path.home() / ".cache"
        except RuntimeError:
            return None
    return Path(base) / "fedmoo"


def cache_dirs(data_dir: Path) -> list[Path]:
    """The folders the cache is looked up in and written to, in order."""
    if os.environ.get("FEDMOO_CACHE"):
        return [Path(os.environ["FEDMOO_CACHE"])]
    return [d for d in (Path(data_dir) / ".fedmoo_cache", user_cache_dir()) if d is not None]


def _load(path: Path) -> Source | None:
    """The cached source, or None (with a warning; the entry is removed) when unreadable."""
    try:
        size = path.stat().st_size      # (a crafted entry: deflated or stride-0 tensors, which
        with zipfile.ZipFile(path) as z:   # torch.load and the digest would blow up in memory)
            if sum(i.file_size for i in z.infolist()) > size:
                raise ValueError("it unpacks to more than its own size")
        fields = torch.load(path, weights_only=True)
        if sum(t.numel() * t.element_size() for t in fields.values()
               if isinstance(t, torch.Tensor)) > size:
            raise ValueError("its tensors hold more bytes than the entry")
        stored = fields.pop("content_digest")
        fields["input_shape"] = tuple(fields["input_shape"])
        src = Source(**fields)
        if content_digest(src) != stored:
            raise ValueError("its content is not the content written")
        return src
    except Exception as e:  # noqa: BLE001 - any damage to a disposable entry means: rebuild it
        log.warning("cache entry %s is unreadable (%s); rebuilding it", path, reason(e))
        try:
            path.unlink()
        except OSError:
            pass
        return None


def _save(src: Source, name: str, folders: list[Path]) -> None:
    """Write the entry atomically (temporary file, os.replace) to the first folder that takes it."""
    fields = {f.name: getattr(src, f.name) for f in dataclasses.fields(src)}
    fields["content_digest"] = content_digest(src)
    failures = []
    for folder in folders:
        tmp = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{name}.{os.getpid()}.tmp"   # (not mkstemp's mode 0600: others
            with open(tmp, "wb") as f:                      # sharing data_dir read it too)
                torch.save(fields, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, folder / name)
            log.debug("data cache: wrote %s", folder / name)
            return
        except (OSError, RuntimeError) as e:      # torch raises some as RuntimeError
            failures.append(f"{folder}: {reason(e)}")
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
    log.warning("the data cache could not be written (%s); going on without it, set FEDMOO_CACHE "
                "to a writable folder to cache", "; ".join(failures) or "no cache folder")


def cached(data_dir: Path, name: str, options: dict, files: list[Path],
           build: Callable[[], Source]) -> Source:
    hashes = _hashes(files)
    entry = f"{name}-{_key(name, options, hashes)}.pt"
    folders = cache_dirs(data_dir)
    for folder in folders:
        if (folder / entry).is_file() and (src := _load(folder / entry)) is not None:
            log.debug("data cache: read %s", folder / entry)
            return src
    src = build()
    if (now := _hashes(files)) != hashes:      # (else cached under the old content's key)
        changed = next(p for (p, a), (_, b) in zip(hashes, now) if a != b)
        raise UserError(f"{changed} changed while it was read (a copy still running?); run "
                        "again once it is complete")
    _save(src, entry, folders)
    return src
