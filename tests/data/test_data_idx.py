"""MNIST / Fashion-MNIST / EMNIST IDX files in torchvision's and Debian's layouts."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch
import pytest

from fedmoo.data import mnist
from fedmoo.errors import UserError
from tests.data.sources import source

DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")


def test_read_idx_parses_header_and_big_endian_data(tmp_path):
    # magic 0x00000803 (ubyte, 3 dims), dims 2 x 2 x 3, then 12 bytes
    raw = bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + \
        (3).to_bytes(4, "big") + bytes(range(12))
    (tmp_path / "a").write_bytes(raw)
    a = mnist.read_idx(tmp_path / "a")
    assert a.shape == (2, 2, 3) and a[1, 0, 2] == 8 and a.dtype == np.uint8
    # int32 labels are big-endian: 0x0C code, 1 dim of 2, values 1 and 258
    raw = bytes([0, 0, 0x0C, 1]) + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + (258).to_bytes(4, "big")
    (tmp_path / "b.gz").write_bytes(gzip.compress(raw))
    assert mnist.read_idx(tmp_path / "b.gz").tolist() == [1, 258]


@pytest.mark.parametrize("raw,needle", [
    (b"\x00\x01\x08\x01\x00\x00\x00\x01\x05", "bad magic"),
    (bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big") + b"\x01\x02", "truncated"),
    (bytes([0, 0, 8, 0]), "declares no dimensions"),   # was a reshape traceback
    (bytes([0, 0, 8, 3]) + bytes(4) + b"\xff" * 8,          # no data, a shape too big: was
     r"declares the shape \(0, 4294967295, 4294967295\), which no array has"),  # a traceback
])
def test_read_idx_rejects_bad_files(tmp_path, raw, needle):
    (tmp_path / "f").write_bytes(raw)
    with pytest.raises(UserError, match=needle):
        mnist.read_idx(tmp_path / "f")


def test_mnist_torchvision_layout_uncompressed(tmp_path, fmt):
    arrs = fmt.write_mnist_family(tmp_path / "MNIST" / "raw")
    src = source("mnist", tmp_path, normalize="unit", download=False)
    assert tuple(src.x.shape) == (13, 1, 28, 28) and src.input_shape == (1, 28, 28)
    assert src.y.tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 2, 0, 1, 2, 2]
    assert src.is_test.tolist() == [False] * 9 + [True] * 4
    x0 = arrs["train"][0][0]
    assert float(src.x[0, 0, 3, 5]) == pytest.approx(x0[3, 5] / 255.0)
    std = source("mnist", tmp_path, download=False)          # (x/255 - 0.1307) / 0.3081
    assert float(std.x[0, 0, 3, 5]) == pytest.approx((x0[3, 5] / 255.0 - 0.1307) / 0.3081, rel=1e-5)


def test_fmnist_gzip_in_system_dir_and_pixel_zscore(tmp_path, fmt):
    system = tmp_path / "usr_share_datasets_fashion-mnist"
    arrs = fmt.write_mnist_family(system, gz=True)
    src = source("fmnist", tmp_path / "data", download=False, system_dir=str(system))
    xtr = arrs["train"][0].astype(np.float64)
    mu, sigma = xtr.mean(0), xtr.std(0)
    xte = arrs["test"][0].astype(np.float64)
    want = (xte[1, 7, 9] - mu[7, 9]) / (sigma[7, 9] + 0.001)   # second test image
    assert float(src.x[10, 0, 7, 9]) == pytest.approx(want, rel=1e-5)
    assert src.class_names[6] == "Shirt" and src.num_classes == 10


def test_fmnist_prefers_data_dir_copy(tmp_path, fmt):
    fmt.write_mnist_family(tmp_path / "FashionMNIST" / "raw", n_train=(1, 1, 1))
    fmt.write_mnist_family(tmp_path / "system", gz=True)
    src = source("fmnist", tmp_path, download=False, system_dir=str(tmp_path / "system"))
    assert len(src.y) == 3 + 4


def test_emnist_images_are_transposed(tmp_path, fmt):
    arrs = fmt.write_mnist_family(tmp_path / "EMNIST" / "raw", prefix="emnist-byclass-")
    src = source("emnist", tmp_path, download=False)
    x0 = arrs["train"][0][0]
    assert float(src.x[0, 0, 3, 5]) == pytest.approx(x0[5, 3] / 255.0)
    assert src.num_classes == 62 and src.class_names[36] == "a"


def test_missing_files_without_download_is_one_line(tmp_path):
    with pytest.raises(UserError) as e:
        source("mnist", tmp_path, download=False)
    msg = str(e.value)
    assert "\n" not in msg and "data=mnist" in msg and str(tmp_path / "MNIST" / "raw") in msg
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz" in msg


@pytest.mark.skipif(not DEBIAN_FMNIST.is_dir(),
                    reason="Debian's dataset-fashion-mnist is not installed "
                           "(apt-get install dataset-fashion-mnist)")
@pytest.mark.slow
def test_real_fmnist_from_debian_package(tmp_path):
    src = source("fmnist", tmp_path, download=False)
    assert tuple(src.x.shape) == (70000, 1, 28, 28)
    assert int((~src.is_test).sum()) == 60000
    counts = np.bincount(src.y[~src.is_test].numpy())
    assert counts.tolist() == [6000] * 10


# --- damaged IDX / gzip files and bombs ----------------------------------------------------------

def _labels(values) -> bytes:
    return bytes([0, 0, 8, 1]) + len(values).to_bytes(4, "big") + bytes(values)


@pytest.mark.parametrize("make,needle", [
    (lambda: gzip.compress(_labels(range(200)))[:-30], "is a truncated or corrupt gzip file"),
    (lambda: gzip.compress(_labels(range(200)))[:-8] + b"\0" * 8, "is a truncated or corrupt gzip"),
    (lambda: b"\x1f\x8b" + b"\x08\x00" + b"junk" * 10, "is a truncated or corrupt gzip file"),
    (lambda: bytes([0, 0, 8, 3, 0, 0]), "is truncated inside its header"),
    (lambda: _labels([1, 2]) + b"\x03", "holds more data than its header (2,) declares"),
])
def test_damaged_files_are_one_line_user_errors(tmp_path, make, needle):
    (tmp_path / "f.gz").write_bytes(make())
    with pytest.raises(UserError) as e:
        mnist.read_idx(tmp_path / "f.gz")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path / "f.gz")) and needle in msg
    assert "re-download it" in msg


def test_gzip_bomb_is_refused_by_its_header_before_decompressing(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist, "MAX_IDX_BYTES", 1 << 16)
    big = bytes([0, 0, 8, 1]) + (1 << 20).to_bytes(4, "big") + b"\0" * (1 << 20)
    (tmp_path / "bomb.gz").write_bytes(gzip.compress(big))
    with pytest.raises(UserError, match=r"header declares \(1048576,\) values"):
        mnist.read_idx(tmp_path / "bomb.gz")
    # a header that lies (2 values, then 1 MiB) is read only as far as it declares + 1 byte
    lie = bytes([0, 0, 8, 1]) + (2).to_bytes(4, "big") + b"\0" * (1 << 20)
    (tmp_path / "lie.gz").write_bytes(gzip.compress(lie))
    with pytest.raises(UserError, match="holds more data than its header"):
        mnist.read_idx(tmp_path / "lie.gz")


def test_labels_outside_the_classes_fail_at_load_naming_the_file(tmp_path, fmt):
    raw = tmp_path / "MNIST" / "raw"
    fmt.write_mnist_family(raw)
    fmt.write_idx(raw / "t10k-labels-idx1-ubyte", np.array([1, 2, 10, 0], np.uint8))
    with pytest.raises(UserError) as e:
        source("mnist", tmp_path, download=False)
    assert str(e.value) == (f"{raw / 't10k-labels-idx1-ubyte'}: label 10 at row 2 is outside "
                            "0..9; re-download it")


@pytest.mark.parametrize("name,code,values", [
    ("train-labels-idx1-ubyte", 0x0D, np.arange(9) + 0.5),     # were truncated to 0..8
    ("train-images-idx3-ubyte", 0x0C, np.full((9, 28, 28), 1000)),  # were 1000/255 "pixels"
])
def test_mnist_files_of_another_idx_type_are_refused(tmp_path, fmt, name, code, values):
    raw = tmp_path / "MNIST" / "raw"
    fmt.write_mnist_family(raw)
    dtype = {0x0D: ">f4", 0x0C: ">i4"}[code]
    head = bytes([0, 0, code, values.ndim]) + b"".join(d.to_bytes(4, "big") for d in values.shape)
    (raw / name).write_bytes(head + values.astype(dtype).tobytes())
    with pytest.raises(UserError) as e:
        source("mnist", tmp_path, download=False)
    assert str(e.value) == (f"{raw / name} holds {np.dtype(dtype).newbyteorder('=')} values, "
                            "not the unsigned bytes of the MNIST family; re-download it")


def test_emnist_labels_checked_against_the_split(tmp_path, fmt):
    raw = tmp_path / "EMNIST" / "raw"
    fmt.write_mnist_family(raw, prefix="emnist-digits-")
    src = source("emnist", tmp_path, split="digits", download=False)
    assert src.num_classes == 10
    fmt.write_idx(raw / "emnist-digits-train-labels-idx1-ubyte", np.array([0] * 8 + [12], np.uint8))
    with pytest.raises(UserError, match="label 12 at row 8 is outside 0..9"):
        source("emnist", tmp_path, split="digits", download=False)


def test_normalised_mnist_is_cached_and_rebuilt_when_a_file_changes(tmp_path, fmt, monkeypatch):
    fmt.write_mnist_family(tmp_path / "MNIST" / "raw")
    first = source("mnist", tmp_path, download=False)
    entries = list((tmp_path / ".fedmoo_cache").glob("mnist-*.pt"))
    assert len(entries) == 1

    def no_decoding(*a, **k):
        raise AssertionError("decoded although cached")

    monkeypatch.setattr(mnist, "_load_idx_pair", no_decoding)
    again = source("mnist", tmp_path, download=False)            # from the cache
    assert torch.equal(again.x, first.x) and torch.equal(again.y, first.y)
    assert again.class_names == first.class_names and again.input_shape == (1, 28, 28)
    with pytest.raises(AssertionError, match="decoded although cached"):
        source("mnist", tmp_path, normalize="unit", download=False)   # other options: rebuilt
    monkeypatch.undo()
    fmt.write_mnist_family(tmp_path / "MNIST" / "raw", n_train=(1, 1, 1))   # new files
    assert len(source("mnist", tmp_path, download=False).y) == 3 + 4
