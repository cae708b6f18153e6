"""CIFAR-10 / CIFAR-100 python pickle batches."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedmoo.data import cifar
from fedmoo.errors import UserError


def test_cifar10_planes_labels_and_split(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path, rows=2)
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="latin1")["data"]
    src = cifar.load_cifar10(tmp_path, normalize="unit", download=False)
    assert tuple(src.x.shape) == (12, 3, 32, 32)
    # row = 1024 red, 1024 green, 1024 blue values, each 32x32 row-major
    assert float(src.x[0, 1, 2, 3]) == pytest.approx(raw[0, 1024 + 2 * 32 + 3] / 255.0)
    assert src.y[:4].tolist() == [0, 1, 1, 2] and src.is_test.tolist() == [False] * 10 + [True] * 2
    assert src.class_names[9] == "truck"
    std = cifar.load_cifar10(tmp_path, download=False)
    want = (raw[0, 2048] / 255.0 - 0.4465) / 0.2010
    assert float(std.x[0, 2, 0, 0]) == pytest.approx(want, rel=1e-5)


def test_cifar10_verify_checks_official_md5(tmp_path, fmt):
    fmt.write_cifar10(tmp_path)
    with pytest.raises(UserError, match="data_batch_1 has the wrong md5"):
        cifar.load_cifar10(tmp_path, download=False, verify=True)


def test_cifar100_fine_labels(tmp_path, fmt):
    fmt.write_cifar100(tmp_path)
    src = cifar.load_cifar100(tmp_path, download=False)
    assert src.y.tolist() == [97, 98, 99, 97, 98] and src.num_classes == 100
    assert src.class_names[99] == "c99"
    train = src.x[~src.is_test].numpy()
    assert np.allclose(train.mean(axis=(0, 2, 3)), 0, atol=1e-5)   # train statistics


def test_corrupt_pickle_is_a_user_error(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path)
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(UserError, match="test_batch is not a CIFAR pickle"):
        cifar.load_cifar10(tmp_path, download=False)
