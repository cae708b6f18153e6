"""CIFAR-10 and CIFAR-100, python pickle version (torchvision's folder layout).

Each batch file is one pickled dict written by Python 2 (read with ``encoding="latin1"``):
``data`` uint8 [n, 3072] (1024 red, 1024 green, 1024 blue values, each 32x32 row-major) and
``labels`` (CIFAR-10) or ``fine_labels`` (CIFAR-100). The archive's md5 is checked on download;
per-file md5s of local files are checked when ``data.verify: true``.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from fedmoo.data import pixels
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


def _unpickle(path: Path) -> dict:
    with open(path, "rb") as f:
        try:
            return pickle.load(f, encoding="latin1")
        except (pickle.UnpicklingError, EOFError, ValueError) as e:
            raise UserError(f"{path} is not a CIFAR pickle ({e}); re-download the dataset") from None


def load(data_dir: Path, name: str, normalize: str = "standard", download: bool = True,
         verify: bool = False) -> Source:
    spec = DATASETS[name]
    root = data_dir / spec["folder"]
    files = spec["files"]
    ensure(name, root, [spec["archive"]], data_dir, download,
           lambda: all((root / f).is_file() for f in files))
    if verify:
        for f, md5 in files.items():
            if md5sum(root / f) != md5:
                raise UserError(f"data={name}: {root / f} has the wrong md5 (expected {md5}); "
                                "re-download it or set data.verify=false")
    xs, ys, flags = [], [], []
    for f in files:
        if f == spec["meta"]:
            continue
        d = _unpickle(root / f)
        x = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        y = np.asarray(d[spec["labels"]], dtype=np.int64)
        if len(x) != len(y):
            raise UserError(f"{root / f}: {len(x)} images but {len(y)} labels; re-download it")
        xs.append(x)
        ys.append(y)
        flags.append(np.full(len(y), f in spec["test"]))
    x, y, is_test = np.concatenate(xs), np.concatenate(ys), np.concatenate(flags)
    names = list(_unpickle(root / spec["meta"])[spec["names"]])
    return Source(
        x=pixels.normalize(x, is_test, normalize, spec["mean"], spec["std"]),
        y=torch.from_numpy(y), is_test=torch.from_numpy(is_test),
        num_classes=spec["num_classes"], input_shape=(3, 32, 32), class_names=names,
    )


def load_cifar10(data_dir: Path, normalize: str = "standard", download: bool = True,
                 verify: bool = False) -> Source:
    return load(data_dir, "cifar10", normalize, download, verify)


def load_cifar100(data_dir: Path, normalize: str = "standard", download: bool = True,
                  verify: bool = False) -> Source:
    return load(data_dir, "cifar100", normalize, download, verify)
