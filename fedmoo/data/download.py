"""Fetching dataset files: md5-checked download and extraction that stays inside its folder.

Loaders call ``ensure(...)`` with the files they need. If the files are missing and downloads are
allowed, each resource is downloaded next to them, its md5 checked, and archives are extracted.
Any failure (no network, bad checksum) ends in one ``UserError`` line that names the dataset, the
expected path and the URL, so a user can put the files there by hand.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from fedmoo.errors import UserError

CHUNK = 1 << 20


def urlopen(url: str):
    """The opener used for every download (tests replace it to prove nothing hits the network)."""
    return urllib.request.urlopen(url, timeout=60)


@dataclass(frozen=True)
class Resource:
    url: str
    md5: str | None = None          # None: no published checksum, the file is taken as is
    extract: bool = False           # unpack the archive into the folder after download

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


def md5sum(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def download(res: Resource, folder: Path) -> Path:
    """Download ``res`` into ``folder`` (kept if already there with the right md5)."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / res.filename
    if dest.exists() and (res.md5 is None or md5sum(dest) == res.md5):
        return dest
    part = dest.with_name(dest.name + ".part")
    with urlopen(res.url) as r, open(part, "wb") as f:
        shutil.copyfileobj(r, f, CHUNK)
    got = md5sum(part)
    if res.md5 is not None and got != res.md5:
        part.unlink()
        raise ValueError(f"md5 {got} of the downloaded file is not the published {res.md5}")
    os.replace(part, dest)
    return dest


def _inside(root: Path, name: str) -> bool:
    target = (root / name).resolve()
    return target == root or root in target.parents


def extract(archive: Path, target: Path) -> None:
    """Unpack a .tar(.gz/.bz2/.xz), .zip or single-file .gz into ``target``.

    Members with absolute paths, ``..`` components, links or device files are refused: an
    archive cannot write outside ``target``.
    """
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    name = archive.name
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            for m in members:
                if not (m.isfile() or m.isdir()) or not _inside(root, m.name):
                    raise ValueError(f"archive member {m.name!r} would escape {target} or is a link")
            tf.extractall(root, members=members, filter="data")
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for n in zf.namelist():
                if not _inside(root, n):
                    raise ValueError(f"archive member {n!r} would escape {target}")
            zf.extractall(root)
    elif name.endswith(".gz"):
        with gzip.open(archive, "rb") as src, open(root / name[:-3], "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
    else:
        raise ValueError(f"{archive} is not a tar, zip or gzip archive")


def ensure(dataset: str, expected: Path, resources: list[Resource], folder: Path,
           allow_download: bool, present) -> None:
    """Make ``present()`` true by downloading ``resources`` into ``folder``, or fail in one line.

    ``expected`` is the path named in the message (what the user should create by hand).
    """
    if present():
        return
    urls = " ".join(r.url for r in resources)
    if not allow_download:
        raise UserError(f"data={dataset}: files not found at {expected}; download {urls} there "
                        "(see docs/datasets.md) or set data.download=true")
    for res in resources:
        try:
            path = download(res, folder)
            if res.extract:
                extract(path, folder)
        except (OSError, ValueError, EOFError, tarfile.TarError, zipfile.BadZipFile) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"data={dataset}: files not found at {expected} and downloading "
                            f"{res.url} failed ({reason}); put the files there by hand "
                            "(see docs/datasets.md)") from None
    if not present():
        raise UserError(f"data={dataset}: downloaded {urls} but {expected} is still incomplete; "
                        "remove the folder and retry")
