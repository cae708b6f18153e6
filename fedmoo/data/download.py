"""Fetching dataset files: md5-checked download and bounded extraction that stays inside its folder.

Archives are checked before anything is written (plain files and folders inside the target, the
limits below); members are written here, not by tarfile's ``filter="data"``, so every Python
>= 3.10 behaves alike.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import stat
import tarfile
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from fedmoo.errors import UserError

CHUNK = 1 << 20
MAX_BYTES = 4 << 30        # largest download, unpacked archive or gunzipped file (CINIC: 1 GB)
MAX_MEMBERS = 500_000      # members of one archive (CINIC-10: 270,000 images)
MAX_RATIO = 100            # unpacked / packed size beyond which ...
RATIO_FLOOR = 64 << 20     # ... content larger than this is taken for a decompression bomb
ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


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


def md5sum(path: Path, algorithm: str = "md5") -> str:
    """Hex digest of a file's bytes, read in CHUNK blocks (a dataset file may be gigabytes)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def check_expansion(what, unpacked: int, packed: int) -> None:
    """Refuse ``unpacked`` bytes out of ``packed`` bytes beyond MAX_BYTES or MAX_RATIO."""
    if unpacked > MAX_BYTES:
        raise ValueError(f"{what} unpacks to more than {MAX_BYTES} bytes; refused")
    if unpacked > RATIO_FLOOR and unpacked > MAX_RATIO * max(packed, 1):
        raise ValueError(f"{what} expands {packed} bytes to over {unpacked} bytes "
                         f"(more than {MAX_RATIO}x), a decompression bomb; refused")


def copy_bounded(src, dst, check) -> None:
    """Copy ``src`` to ``dst`` in chunks, calling ``check(bytes so far)`` before each write."""
    total = 0
    while block := src.read(CHUNK):
        total += len(block)
        check(total)
        dst.write(block)


def _download_limit(total: int) -> None:
    if total > MAX_BYTES:
        raise ValueError(f"the download exceeds {MAX_BYTES} bytes; refused")


def download(res: Resource, folder: Path) -> Path:
    """Download ``res`` into ``folder`` (kept if already there with the right md5) through
    ``_part(name)``, deleted unless the md5 matches; at most MAX_BYTES are accepted."""
    dest = folder / res.filename
    if dest.exists() and (res.md5 is None or md5sum(dest) == res.md5):
        return dest
    part = _part(dest)
    try:
        with urlopen(res.url) as r:
            folder.mkdir(parents=True, exist_ok=True)  # once the server answers: an offline
            with open(part, "wb") as f:                # try leaves no empty folder behind
                copy_bounded(r, f, _download_limit)
        got = md5sum(part)
        if res.md5 is not None and got != res.md5:
            raise ValueError(f"md5 {got} of the downloaded {res.filename} is not the published "
                             f"{res.md5}; the download was deleted")
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return dest


def _unpack(archive: Path, root: Path, entries, open_member) -> None:
    """Check every ``(member, name, is_dir, is_file, size)`` entry, then create the folders and
    files (each written whole, then renamed), under a marker (``_marker``) removed at the end;
    on failure remove the files written so far."""
    plan, total = [], 0
    packed = archive.stat().st_size
    for n, (member, name, is_dir, is_file, size) in enumerate(entries, 1):
        if n > MAX_MEMBERS:
            raise ValueError(f"{archive.name} has more than {MAX_MEMBERS} members; refused")
        if not (is_dir or is_file):
            raise ValueError(f"archive member {name!r} is a link or special file; refused")
        dest = (root / name).resolve()       # a file named "." would be written beside root
        if Path(name).is_absolute() or not dest.is_relative_to(root) or is_file and dest == root:
            raise ValueError(f"archive member {name!r} would escape {root}; refused")
        total += size
        check_expansion(archive.name, total, packed)
        plan.append((member, root / name, is_dir))
    marker = _marker(archive.name, root)
    marker.touch()
    written: list[Path] = []
    try:
        for member, dest, is_dir in plan:
            if is_dir:
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            written.append(part := _part(dest))
            with open_member(member) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)     # readers stop at the declared size
            os.replace(part, dest)          # (a reader, another job, never sees half a file)
            written[-1] = dest
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    marker.unlink(missing_ok=True)      # (another job unpacking the same archive may be first)


def _part(dest: Path) -> Path:
    """Where this process writes ``dest`` before renaming it: its own file, so jobs that fetch
    the same file at once do not write into each other's."""
    return dest.with_name(f".{dest.name}.{os.getpid()}.part")


def _marker(archive_name: str, folder: Path) -> Path:
    """Present while ``archive_name`` is being unpacked into ``folder``: left by a killed or
    failed extraction, it says that not all of its files are there."""
    return folder / f".{archive_name}.extracting"


def extract(archive: Path, target: Path) -> None:
    """Unpack a .tar(.gz/.bz2/.xz), .zip or single-file .gz into ``target`` (module docstring);
    the kind comes from the name, else from the content (by name first: a gzip file of zeros
    also passes tarfile.is_tarfile)."""
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    name = archive.name.lower()
    by_name = name.endswith((*TAR_SUFFIXES, ".zip", ".gz"))
    if name.endswith(TAR_SUFFIXES) or not by_name and tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            # Lazy iteration: a member whose declared size breaks the limits stops the scan before
            # its data is decompressed.
            _unpack(archive, root, ((m, m.name, m.isdir(), m.isfile() and not m.issparse(),
                                     m.size if m.isfile() else 0) for m in tf), tf.extractfile)
    elif name.endswith(".zip") or not by_name and zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            for i in infos:
                if i.compress_type not in ZIP_METHODS:
                    raise ValueError(f"archive member {i.filename!r} uses compression method "
                                     f"{i.compress_type} (only stored and deflated are read)")
            # zipfile stops at each member's declared size (and fails its CRC if data runs on);
            # a link has S_IFLNK in the Unix mode
            _unpack(archive, root, ((i, i.filename, i.is_dir(), not i.is_dir() and not
                                     stat.S_ISLNK(i.external_attr >> 16), i.file_size)
                                    for i in infos), zf.open)
    elif by_name:                                     # a single gzipped file
        dest = root / archive.name[:-3]
        tmp = _part(dest)
        try:
            with gzip.open(archive, "rb") as src, open(tmp, "wb") as dst:
                packed = archive.stat().st_size
                copy_bounded(src, dst, lambda n: check_expansion(archive.name, n, packed))
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
    else:
        raise ValueError(f"{archive} is not a tar, zip or gzip archive")


def ensure(dataset: str, expected: Path, resources: list[Resource], folder: Path,
           allow_download: bool, present) -> None:
    """Make ``present()`` true by downloading ``resources`` into ``folder``, or fail in one line
    naming ``expected`` (what the user should create by hand); files left by a killed
    extraction are not taken for present."""
    if present() and not any(_marker(r.filename, folder).exists() for r in resources):
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
        except (OSError, ValueError, EOFError, zlib.error, tarfile.TarError,
                zipfile.BadZipFile) as e:         # what a failed download or extraction raises
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"data={dataset}: files not found at {expected} and downloading "
                            f"{res.url} failed ({reason}); put the files there by hand "
                            "(see docs/datasets.md)") from None
    if not present():
        raise UserError(f"data={dataset}: downloaded {urls} but {expected} is still incomplete; "
                        "remove the folder and retry")
