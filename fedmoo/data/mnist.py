"""MNIST, Fashion-MNIST and EMNIST from IDX files (torchvision's ``<root>/<Name>/raw/`` layout),
each plain or ``.gz``. Fashion-MNIST is also read from Debian's ``dataset-fashion-mnist`` folder
(``data.system_dir``), so it works offline. EMNIST images are stored transposed (NIST's column
order); the loader transposes them back.
"""

from __future__ import annotations

import gzip
import math
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np

from fedmoo.data import pixels
from fedmoo.data.cache import cached
from fedmoo.data.checks import check_labels, reason
from fedmoo.data.download import Resource, ensure
from fedmoo.data.federated import Source
from fedmoo.errors import UserError
from fedmoo.config.hparams.data import EMNIST_NUM_CLASSES, FMNIST_SYSTEM_DIR

IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MAX_IDX_BYTES = 1 << 30   # data of one IDX file (EMNIST byclass train images: 547 MB)
IDX_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",     # the order
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]       # _load_idx_pair takes

MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
MNIST_MD5 = {"train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
             "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
             "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
             "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}
FMNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FMNIST_MD5 = {"train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
              "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
              "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
              "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"}
EMNIST_ZIP = Resource("https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",
                      "58c8d27c78d21e728a6bc7b3cc06412e", extract=True)

FMNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                  "Sneaker", "Bag", "Ankle boot"]
EMNIST_BYCLASS = [*"0123456789", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"abcdefghijklmnopqrstuvwxyz"]


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (plain or gzip: two zero bytes, a dtype code, ndim, big-endian uint32 dimensions,
    row-major data) as a numpy array. Only the bytes the header declares (at most
    ``MAX_IDX_BYTES``) are read, so a gzip bomb cannot fill the memory."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_DTYPES:
                raise UserError(f"{path} is not an IDX file (bad magic number); re-download it")
            if head[3] == 0:           # a 0-d array would hold no samples
                raise UserError(f"{path} is not an IDX file (its header declares no "
                                "dimensions); re-download it")
            raw_dims = f.read(4 * head[3])
            if len(raw_dims) < 4 * head[3]:
                raise UserError(f"{path} is truncated inside its header; re-download it")
            dims = struct.unpack(f">{head[3]}I", raw_dims)
            dtype = np.dtype(IDX_DTYPES[head[2]])
            need = math.prod(dims) * dtype.itemsize
            if need > MAX_IDX_BYTES:
                raise UserError(f"{path}: header declares {dims} values ({need} bytes), more than "
                                f"the {MAX_IDX_BYTES} bytes an IDX file may hold; re-download it")
            data = f.read(need)
            if len(data) < need:
                raise UserError(f"{path} is truncated: header says {dims}, file holds "
                                f"{len(data) // dtype.itemsize} values; re-download it")
            if f.read(1):
                raise UserError(f"{path} holds more data than its header {dims} declares; "
                                "re-download it")
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise UserError(f"{path} is a truncated or corrupt gzip file ({reason(e)}); "
                        "re-download it") from None
    except OSError as e:
        raise UserError(f"{path} cannot be read ({reason(e)})") from None
    try:
        return np.frombuffer(data, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="))
    except ValueError:     # no data but a shape numpy refuses: (0, 2**32-1, 2**32-1), 65 dims
        raise UserError(f"{path}: its header declares the shape {dims}, which no array has; "
                        "re-download it") from None


def _complete(dirs: list[Path], names: list[str]) -> list[Path] | None:
    """The files ``names`` (plain or ``.gz``) in the first of ``dirs`` holding them all."""
    for d in dirs:
        found = [next((p for p in (d / n, d / f"{n}.gz") if p.is_file()), None) for n in names]
        if all(found):
            return found
    return None


def _load_idx_pair(paths: list[Path], num_classes: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) -> x [M,H,W], y [M], is_test [M];
    files of another IDX type than ubyte and labels outside ``0..num_classes-1`` are refused,
    naming the file."""
    xtr, ytr, xte, yte = (read_idx(p) for p in paths)
    for x, y, p, q in ((xtr, ytr, paths[0], paths[1]), (xte, yte, paths[2], paths[3])):
        for a, f in ((x, p), (y, q)):     # pixels 0..255 and class numbers: unsigned bytes
            if a.dtype != np.uint8:
                raise UserError(f"{f} holds {a.dtype} values, not the unsigned bytes of the "
                                "MNIST family; re-download it")
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise UserError(f"{p}: images {x.shape} and labels {y.shape} do not match; "
                            "re-download the dataset")
        check_labels(y, num_classes, str(q), "re-download it")
    x = np.concatenate([xtr, xte])
    y = np.concatenate([ytr, yte]).astype(np.int64)
    is_test = np.concatenate([np.zeros(len(ytr), bool), np.ones(len(yte), bool)])
    return x, y, is_test


def _source(x, y, is_test, normalize, num_classes, class_names, mean=None, std=None) -> Source:
    x = x[:, None]                                     # [M, 1, H, W]
    return Source(x=pixels.normalize(x, is_test, normalize, mean, std), y=y, is_test=is_test,
                  num_classes=num_classes, input_shape=tuple(x.shape[1:]), class_names=class_names)


def idx_files(data_dir: Path, dataset: str, download: bool,
              system_dir: str | None = None) -> list[Path]:
    """The four IDX files of ``mnist`` or ``fmnist`` (also looked up in ``system_dir``, Debian's
    folder) from the first folder holding them all, downloading them into ``data_dir`` if
    allowed; a UserError names the folder, the URLs and, for Fashion-MNIST on Debian-like
    systems, the package."""
    folder, url, md5 = {"mnist": ("MNIST", MNIST_URL, MNIST_MD5),
                        "fmnist": ("FashionMNIST", FMNIST_URL, FMNIST_MD5)}[dataset]
    dirs = [data_dir / folder / "raw"] + ([Path(system_dir)] if system_dir else [])
    try:
        ensure(dataset, dirs[0], [Resource(url + f"{n}.gz", md5[f"{n}.gz"]) for n in IDX_NAMES],
               dirs[0], download, lambda: _complete(dirs, IDX_NAMES) is not None)
    except UserError as e:      # name Debian's package where the loader looks for it
        if dataset != "fmnist" or Path(FMNIST_SYSTEM_DIR) not in dirs \
                or shutil.which("apt-get") is None:
            raise
        raise UserError(f"{e}; or install Debian's copy into {FMNIST_SYSTEM_DIR}: "
                        "sudo apt-get install dataset-fashion-mnist") from None
    return _complete(dirs, IDX_NAMES)


def load_arrays(data_dir: Path, dataset: str, download: bool, system_dir: str | None = None
                ) -> tuple[tuple[np.ndarray, ...], str]:
    """(uint8 images ``[70000, 28, 28]``, labels, test flag) of ``mnist`` or ``fmnist`` and the
    folder they were read from."""
    files = idx_files(data_dir, dataset, download, system_dir)
    return _load_idx_pair(files, 10), str(files[0].parent)


def _cached_source(dataset: str, data_dir: Path, download: bool, normalize: str,
                   class_names: list[str], mean: float, std: float,
                   system_dir: str | None = None) -> Source:
    """The normalised source, from the data cache when the IDX files have not changed: decoding
    and normalising 70,000 images costs 1-3 s a run, reading the cached tensors about 0.1 s."""
    files = idx_files(data_dir, dataset, download, system_dir)
    src = cached(data_dir, dataset, {"normalize": normalize}, files, lambda: _source(
        *_load_idx_pair(files, 10), normalize, 10, class_names, [mean], [std]))
    src.location = str(files[0].parent)          # data_dir's copy or the system one
    return src


def load_mnist(data_dir: Path, *, normalize: str, download: bool) -> Source:
    """MNIST (60,000 train / 10,000 test), ``standard`` = (x/255 - 0.1307) / 0.3081."""
    return _cached_source("mnist", data_dir, download, normalize, [str(i) for i in range(10)],
                          0.1307, 0.3081)


def load_fmnist(data_dir: Path, *, normalize: str, download: bool,
                system_dir: str | None) -> Source:
    """Fashion-MNIST from ``data_dir/FashionMNIST/raw`` or ``system_dir`` (Debian's package)."""
    return _cached_source("fmnist", data_dir, download, normalize, FMNIST_CLASSES, 0.2860, 0.3530,
                          system_dir)


def load_emnist(data_dir: Path, *, split: str, normalize: str, download: bool) -> Source:
    """EMNIST ``split`` (byclass: 62 classes, digits, upper case, lower case in LEAF's order)."""
    raw = data_dir / "EMNIST" / "raw"
    names = [f"emnist-{split}-{n.replace('t10k', 'test')}" for n in IDX_NAMES]
    ensure("emnist", raw, [EMNIST_ZIP], raw, download,
           lambda: _complete([raw, raw / "gzip"], names) is not None)
    n_cls = EMNIST_NUM_CLASSES[split]
    x, y, t = _load_idx_pair(_complete([raw, raw / "gzip"], names), n_cls)
    x = np.ascontiguousarray(x.transpose(0, 2, 1))     # NIST column order -> upright images
    return _source(x, y, t, normalize, n_cls, EMNIST_BYCLASS if split == "byclass" else None)
