"""CIFAR-10 / CIFAR-100 python pickle batches."""

from __future__ import annotations

import builtins
import os
import pickle
import struct
import tracemalloc

import numpy as np
import pytest

from fedmoo.errors import UserError
from tests.data.sources import source


def test_cifar10_planes_labels_and_split(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path, rows=2)
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="latin1")["data"]
    src = source("cifar10", tmp_path, normalize="unit", download=False)
    assert tuple(src.x.shape) == (12, 3, 32, 32)
    # row = 1024 red, 1024 green, 1024 blue values, each 32x32 row-major
    assert float(src.x[0, 1, 2, 3]) == pytest.approx(raw[0, 1024 + 2 * 32 + 3] / 255.0)
    assert src.y[:4].tolist() == [0, 1, 1, 2] and src.is_test.tolist() == [False] * 10 + [True] * 2
    assert src.class_names[9] == "truck"
    std = source("cifar10", tmp_path, download=False)
    want = (raw[0, 2048] / 255.0 - 0.4465) / 0.2010
    assert float(std.x[0, 2, 0, 0]) == pytest.approx(want, rel=1e-5)


def test_cifar10_verify_checks_official_md5(tmp_path, fmt):
    fmt.write_cifar10(tmp_path)
    with pytest.raises(UserError, match="data_batch_1 has the wrong md5"):
        source("cifar10", tmp_path, download=False, verify=True)


def test_cifar100_fine_labels(tmp_path, fmt):
    fmt.write_cifar100(tmp_path)
    src = source("cifar100", tmp_path, download=False)
    assert src.y.tolist() == [97, 98, 99, 97, 98] and src.num_classes == 100
    assert src.class_names[99] == "c99"
    train = src.x[~src.is_test].numpy()
    assert np.allclose(train.mean(axis=(0, 2, 3)), 0, atol=1e-5)   # train statistics


def test_corrupt_pickle_is_a_user_error(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path)
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(UserError, match="test_batch is not a CIFAR pickle"):
        source("cifar10", tmp_path, download=False)


# --- restricted unpickling: CIFAR files can hold data only -----------------------------------

def _s(text) -> bytes:
    """A Python 2 ``str`` opcode (SHORT_BINSTRING / BINSTRING), as cPickle wrote CIFAR."""
    b = text if isinstance(text, bytes) else text.encode("latin1")
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b


def py2_pickle(d: dict) -> bytes:
    """A protocol-2 pickle laid out like the original CIFAR files (Python 2 + numpy 1.x):
    numpy.core.multiarray._reconstruct, numpy.dtype, array bytes as a Python 2 str."""
    out = [b"\x80\x02}("]
    for k, v in d.items():
        out.append(_s(k))
        if isinstance(v, np.ndarray):
            out += [b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85", _s("b"),
                    b"\x87R(K\x01(", b"".join(b"J" + struct.pack("<i", n) for n in v.shape),
                    b"tcnumpy\ndtype\n", _s(v.dtype.str[1:]), b"K\x00K\x01\x87R(K\x03", _s("|"),
                    b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89", _s(v.tobytes()), b"tb"]
        elif isinstance(v, list):
            out += [b"](", b"".join(b"J" + struct.pack("<i", n) if isinstance(n, int) else _s(n)
                                    for n in v), b"e"]
        else:
            out.append(_s(v))
    return b"".join(out) + b"u."


def test_python2_layout_and_numpy1_module_names_are_read(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path, rows=2)
    data = (np.arange(2 * 3072) % 251).astype(np.uint8).reshape(2, 3072)
    (folder / "data_batch_3").write_bytes(py2_pickle(
        {"batch_label": "training batch 3 of 5", "labels": [6, 9], "data": data,
         "filenames": ["a.png", "b.png"]}))
    src = source("cifar10", tmp_path, normalize="unit", download=False)
    assert src.y[4:6].tolist() == [6, 9]
    assert float(src.x[5, 2, 31, 31]) == pytest.approx(data[1, 3071] / 255.0)


class _Shell:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _Exec:
    def __reduce__(self):
        return builtins.exec, ("import os; os.system('touch MARKER2')",)


@pytest.mark.parametrize("protocol", [2, 4])
def test_malicious_pickle_runs_nothing_and_is_a_user_error(tmp_path, fmt, protocol, monkeypatch):
    folder = fmt.write_cifar10(tmp_path)
    marker = tmp_path / "MARKER"
    (folder / "data_batch_2").write_bytes(pickle.dumps({"data": _Shell(marker)}, protocol=protocol))
    with pytest.raises(UserError) as e:
        source("cifar10", tmp_path, download=False)
    assert not marker.exists()
    msg = str(e.value)
    assert "\n" not in msg and f"{folder / 'data_batch_2'} is not a CIFAR pickle batch file" in msg
    assert "system, which CIFAR batches never do" in msg and "re-download" in msg
    monkeypatch.chdir(tmp_path)
    (folder / "data_batch_2").write_bytes(pickle.dumps([_Exec()], protocol=protocol))
    with pytest.raises(UserError, match=r"\.exec, which CIFAR batches never do"):
        source("cifar10", tmp_path, download=False)
    assert not (tmp_path / "MARKER2").exists()
    pickle.loads((folder / "data_batch_2").read_bytes())      # the payload is live: plain
    assert (tmp_path / "MARKER2").exists()                     # pickle would have run it


def test_allowed_globals_cannot_be_abused(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path)
    obj_array = np.array([{"a": 1}], dtype=object)            # dtype('O') is refused
    (folder / "test_batch").write_bytes(pickle.dumps({"data": obj_array}, protocol=2))
    with pytest.raises(UserError, match="an array of Python objects"):
        source("cifar10", tmp_path, download=False)
    codec = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x04\x00\x00\x00zlib\x86R."
    (folder / "test_batch").write_bytes(codec)
    with pytest.raises(UserError, match="codec call other than latin1"):
        source("cifar10", tmp_path, download=False)


def test_unreadable_file_with_published_md5_names_its_md5(tmp_path, fmt, monkeypatch):
    folder = fmt.write_cifar10(tmp_path)
    (folder / "data_batch_4").write_bytes(b"\x80\x02}q\x00(X")      # truncated pickle
    with pytest.raises(UserError) as e:
        source("cifar10", tmp_path, download=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{folder / 'data_batch_4'} is not a CIFAR pickle")
    assert "is not the published c58f" not in msg
    assert "not the published 634d18415352ddfa80567beed471001a" in msg


@pytest.mark.parametrize("batch,needle", [
    ({"labels": [0, 1]}, "has no 'data' entry"),
    ({"labels": [0, 1], "data": np.zeros((2, 100), np.uint8)}, "'data' must be uint8 [n, 3072]"),
    ({"labels": [0, 1], "data": [[0] * 3072] * 2}, "'data' must be uint8 [n, 3072]"),
    ({"labels": ["a", "b"], "data": np.zeros((2, 3072), np.uint8)}, "must be a list of integers"),
    ({"labels": [0], "data": np.zeros((2, 3072), np.uint8)}, "2 images but 1 labels"),
    ({"labels": [0, 10], "data": np.zeros((2, 3072), np.uint8)},
     r"label 10 at row 1 is outside 0..9"),
    ({"labels": [-1, 0], "data": np.zeros((2, 3072), np.uint8)}, r"label -1 at row 0 is outside"),
    ([1, 2], "holds a list, not a dict"),
])
def test_damaged_batches_name_the_file(tmp_path, fmt, batch, needle):
    folder = fmt.write_cifar10(tmp_path)
    (folder / "data_batch_5").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(UserError) as e:
        source("cifar10", tmp_path, download=False)
    msg = str(e.value)
    assert "\n" not in msg and str(folder / "data_batch_5") in msg and needle in msg


def test_nested_labels_are_refused_before_they_are_expanded(tmp_path, fmt):
    # 1,000 references to one list of 1,000 zeros: 4 kB of pickle, 8 MB as an int64 array (a
    # third level of references made 8 GB of a 15 kB file)
    folder = fmt.write_cifar10(tmp_path)
    row = [0] * 1000
    d = {"labels": [row] * 1000, "data": np.zeros((2, 3072), np.uint8)}
    (folder / "data_batch_5").write_bytes(pickle.dumps(d, protocol=2))
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="'labels' must be a list of integers"):
            source("cifar10", tmp_path, download=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000


def test_cifar100_label_outside_100_classes(tmp_path, fmt):
    folder = fmt.write_cifar100(tmp_path)
    d = {"fine_labels": [5, 100], "data": np.zeros((2, 3072), np.uint8)}
    (folder / "test").write_bytes(pickle.dumps(d, protocol=2))
    with pytest.raises(UserError, match=r"test: label 100 at row 1 is outside 0..99"):
        source("cifar100", tmp_path, download=False)


def test_bytes_keys_are_read(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path, rows=2)
    d = {b"labels": [4, 2], b"data": np.zeros((2, 3072), np.uint8)}
    (folder / "data_batch_1").write_bytes(pickle.dumps(d, protocol=2))
    assert source("cifar10", tmp_path, download=False).y[:2].tolist() == [4, 2]


def test_ndarray_cannot_be_called_to_allocate(tmp_path, fmt):
    folder = fmt.write_cifar10(tmp_path)
    call = b"\x80\x02cnumpy\nndarray\nJ\x00\xe1\xf5\x05\x85R."     # ndarray((100_000_000,))
    (folder / "test_batch").write_bytes(call)
    with pytest.raises(UserError, match="not callable"):
        source("cifar10", tmp_path, download=False)
