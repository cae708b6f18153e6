"""CIFAR-10 and CIFAR-100, python pickle version (torchvision's folder layout).

Each batch file is a dict pickled by Python 2 (read with ``encoding="latin1"``): ``data`` uint8
[n, 3072] (red, green, blue planes of 32x32) and ``labels`` / ``fine_labels``. The archive's md5
is checked on download, each file's when ``data.verify: true``. ``BatchUnpickler`` admits no
global but numpy's array reconstruction, so a crafted file cannot run code; a file that is not a
batch dict is a UserError naming it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from fedmoo.data import pixels
from fedmoo.data.checks import check_labels, reason
from fedmoo.data.download import Resource, ensure, md5sum
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

# Per dataset: folder, archive, files with their md5, which are test files, the meta file, the
# label / class-name keys and the normalisation constants (None = the training split's own).
DATASETS = {
    "cifar10": dict(
        folder="cifar-10-batches-py",
        archive=Resource("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                         "c58f30108f718f92721af3b95e74349a", extract=True),
        files={"data_batch_1": "c99cafc152244af753f735de768cd75f",
               "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
               "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
               "data_batch_4": "634d18415352ddfa80567beed471001a",
               "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
               "test_batch": "40351d587109b95175f43aff81a1287e",
               "batches.meta": "5ff9c542aee3614f3951f8cda6e48888"},
        test=("test_batch",), meta="batches.meta", labels="labels", names="label_names",
        num_classes=10, mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)),
    "cifar100": dict(
        folder="cifar-100-python",
        archive=Resource("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                         "eb9058c3a382ffc7106e4002c42a8d85", extract=True),
        files={"train": "16019d7e3df5f24257cddd939b257f8d",
               "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
               "meta": "7973b15100ade9c7d40fb424638fde48"},
        test=("test",), meta="meta", labels="fine_labels", names="fine_label_names",
        num_classes=100, mean=None, std=None),
}


MAX_FILE_BYTES = 512 << 20   # the largest CIFAR file (CIFAR-100 train) has 155 MB


try:
    from numpy._core.multiarray import _reconstruct  # numpy >= 2
except ImportError:
    from numpy.core.multiarray import _reconstruct  # numpy 1.x

# Stands for ``numpy.ndarray`` in a pickle: an argument of ``_reconstruct``, not callable
# (calling ndarray itself could allocate any shape).
_NDARRAY = object()


def _empty_array(subtype, shape, typecode):
    """numpy's ``_reconstruct`` as ndarray pickles call it: an empty array that BUILD fills."""
    if subtype is not _NDARRAY or tuple(shape) != (0,):
        raise pickle.UnpicklingError("an array of an unexpected type or shape")
    return _reconstruct(np.ndarray, (0,), typecode)


def _plain_dtype(*args):
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError("an array of Python objects")
    return dt


def _latin1(text, encoding="latin1"):
    """``_codecs.encode``, which Python 3 writes for bytes in protocol-2 pickles."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("a codec call other than latin1 text -> bytes")
    return text.encode("latin1")


# The only globals a CIFAR batch file refers to (written by Python 2's cPickle, or protocol 2 by
# Python 3): numpy's array reconstruction and, for bytes, _codecs.encode.
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"): _empty_array,
            ("numpy._core.multiarray", "_reconstruct"): _empty_array,
            ("numpy", "ndarray"): _NDARRAY, ("numpy", "dtype"): _plain_dtype,
            ("_codecs", "encode"): _latin1, ("codecs", "encode"): _latin1}


class BatchUnpickler(pickle.Unpickler):
    """An unpickler that builds dicts, lists, strings, numbers and plain numpy arrays only."""

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, which CIFAR batches never do")


def _unpickle(path: Path, md5: str, *keys: str) -> list:
    """The entries ``keys`` of the dict in one CIFAR pickle file; anything else (no dict, a key
    missing) is a UserError naming the file."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{size} bytes, more than any CIFAR file")
        d = BatchUnpickler(io.BytesIO(path.read_bytes()), encoding="latin1").load()
        if not isinstance(d, dict):
            raise TypeError(f"it holds a {type(d).__name__}, not a dict")
    except Exception as e:  # noqa: BLE001 - a damaged or crafted pickle can raise anything
        hint = ""
        if path.is_file() and (got := md5sum(path)) != md5:
            hint = f"; its md5 {got} is not the published {md5}"
        raise UserError(f"{path} is not a CIFAR pickle batch file ({reason(e)}{hint}); "
                        "re-download the dataset") from None
    d = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in d.items()}
    for key in keys:
        if key not in d:
            raise UserError(f"{path} has no {key!r} entry, so it is not a CIFAR batch file; "
                            "re-download the dataset")
    return [d[key] for key in keys]


def _batch(path: Path, spec: dict, md5: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [n, 3, 32, 32] and labels int64 [n] of one batch, checked."""
    data, labels = _unpickle(path, md5, "data", spec["labels"])
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != 3072:
        shape = getattr(data, "shape", type(data).__name__)
        raise UserError(f"{path}: 'data' must be uint8 [n, 3072], got {shape}; "
                        "re-download the dataset")
    try:
        y = np.asarray(labels)
        if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
            raise ValueError
        y = y.astype(np.int64)
    except (ValueError, TypeError):
        raise UserError(f"{path}: {spec['labels']!r} must be a list of integers; "
                        "re-download the dataset") from None
    if len(data) != len(y):
        raise UserError(f"{path}: {len(data)} images but {len(y)} labels; re-download it")
    check_labels(y, spec["num_classes"], str(path), "re-download the dataset")
    return data.reshape(-1, 3, 32, 32), y


def load(data_dir: Path, name: str, normalize: str, download: bool, verify: bool) -> Source:
    spec = DATASETS[name]
    root = data_dir / spec["folder"]
    files = spec["files"]
    ensure(name, root, [spec["archive"]], data_dir, download,
           lambda: all((root / f).is_file() for f in files))
    xs, ys, flags = [], [], []
    for f, md5 in files.items():        # the meta file comes last
        if verify and (got := md5sum(root / f)) != md5:
            raise UserError(f"data={name}: {root / f} has the wrong md5 ({got}, expected "
                            f"{md5}); re-download it or set data.verify=false")
        if f != spec["meta"]:
            x, y = _batch(root / f, spec, md5)
            xs.append(x)
            ys.append(y)
            flags.append(np.full(len(y), f in spec["test"]))
    x, y, is_test = np.concatenate(xs), np.concatenate(ys), np.concatenate(flags)
    meta = root / spec["meta"]
    [names] = _unpickle(meta, files[spec["meta"]], spec["names"])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UserError(f"{meta}: {spec['names']!r} must be a list of strings; "
                        "re-download the dataset")
    return Source(x=pixels.normalize(x, is_test, normalize, spec["mean"], spec["std"]), y=y,
                  is_test=is_test, num_classes=spec["num_classes"], input_shape=(3, 32, 32),
                  class_names=list(names))


def load_cifar10(data_dir: Path, *, normalize: str, download: bool, verify: bool) -> Source:
    return load(data_dir, "cifar10", normalize, download, verify)


def load_cifar100(data_dir: Path, *, normalize: str, download: bool, verify: bool) -> Source:
    return load(data_dir, "cifar100", normalize, download, verify)
