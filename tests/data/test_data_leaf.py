"""LEAF FEMNIST and Shakespeare JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedmoo.errors import UserError
from tests.data.sources import source


def _img(v):
    return [v] * 784


def _femnist(root, fmt):
    fmt.write_leaf(root / "femnist" / "train", [
        {"f0001_02": ([_img(0.1), _img(0.2)], [3, 61])},
        {"f0000_14": ([_img(0.3)], [10])},
    ])
    fmt.write_leaf(root / "femnist" / "test", [
        {"f0000_14": ([_img(0.4)], [10]), "f0001_02": ([_img(0.5)], [36])},
    ])


def test_femnist_merges_files_sorted_users(tmp_path, fmt):
    _femnist(tmp_path, fmt)
    src = source("femnist", tmp_path)
    assert src.client_names == ["f0000_14", "f0001_02"]
    assert src.owner.tolist() == [0, 0, 1, 1, 1]
    assert src.y.tolist() == [10, 10, 3, 61, 36]
    assert src.is_test.tolist() == [False, True, False, False, True]
    assert tuple(src.x.shape) == (5, 1, 28, 28) and float(src.x[1, 0, 27, 27]) == pytest.approx(0.4)
    assert src.class_names[36] == "a"
    again = source("femnist", tmp_path)                         # from the cache
    assert again.y.tolist() == src.y.tolist() and again.input_shape == (1, 28, 28)
    sub = source("femnist", tmp_path, users=["f0001_02"])
    assert sub.client_names == ["f0001_02"] and len(sub.y) == 3


def test_shakespeare_vocabulary_encoding_and_oov_dropped(tmp_path, fmt):
    a = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to su"
    assert len(a) == 80
    bad = "~" + a[1:]
    fmt.write_leaf(tmp_path / "shakespeare" / "train",
                   [{"HAMLET_X": ([a, bad], ["u", "f"])}])
    fmt.write_leaf(tmp_path / "shakespeare" / "test", [{"HAMLET_X": ([a], ["}"])}])
    src = source("shakespeare", tmp_path)
    assert tuple(src.x.shape) == (2, 80) and src.num_classes == 80
    assert src.x[0, :3].tolist() == [44.0, 67.0, 1.0]       # 'T' = 25 + 19, 'o' = 53 + 14, ' '
    assert src.y.tolist() == [73, 79]                         # 'u' = 53 + 20, '}' = 79
    assert src.is_test.tolist() == [False, True]


def test_missing_leaf_files_name_the_recipe(tmp_path):
    with pytest.raises(UserError) as e:
        source("femnist", tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "femnist" / "train") in msg
    assert "https://github.com/TalwalkarLab/leaf" in msg and "preprocess.sh" in msg


def test_unknown_user_is_a_user_error(tmp_path, fmt):
    _femnist(tmp_path, fmt)
    with pytest.raises(UserError, match="'nobody' is not a user"):
        source("femnist", tmp_path, users=["nobody"])


# --- damaged LEAF JSON: one line naming the file and the user ---------------------------------

def _user(x, y):
    return json.dumps({"users": ["u1"], "user_data": {"u1": {"x": x, "y": y}}}).encode()


@pytest.mark.parametrize("raw,needle", [
    (b'{"users": [], "user_data": {"u1": {"y": [3]}}}', "user u1 has no 'x' and 'y' lists"),
    (b'{"user_data": {"u1": {"x": 5, "y": [3]}}}', "user u1 has no 'x' and 'y' lists"),
    (b'{"user_data": {"u1": [1, 2]}}', "user u1 has no 'x' and 'y' lists"),
    (b'{"user_data": {}}', "no users in 'user_data'"),
    (b'{"users": ["u1"]}', "not a LEAF JSON file (no 'user_data' object)"),
    (b'[1, 2]', "not a LEAF JSON file (no 'user_data' object)"),
    (b'{"user_data": ', "not a LEAF JSON file (JSONDecodeError: Expecting value"),
    (b'{"user_data": {"\xff\xfe": 1}}', "byte 16 is not UTF-8 text"),
    (_user([], []), "user u1 has no training samples"),
    (_user([[0.5] * 784], [3, 4]), "user u1 has 1 inputs but 2 targets"),
    (_user([["a"] * 784], [3]), "user u1: ValueError: could not convert string to float"),
    (_user([[0.5] * 783], [3]), "user u1: ValueError: FEMNIST inputs must be 784 numbers each"),
    (_user([[None] * 784], [3]), "user u1: ValueError: FEMNIST inputs must be finite numbers"),
    (_user([[0.5] * 784], [2.5]), "user u1: ValueError: FEMNIST targets must be integers"),
    (_user([[0.5] * 784], ["a"]), "user u1: ValueError: FEMNIST targets must be integers"),
    (_user([[0.5] * 784], [62]), "user u1: ValueError: label 62 of sample 0 is outside 0..61"),
    (_user([[0.5] * 784], [2**70]), "user u1: OverflowError: Python int too large"),  # were
    (b'{"user_data": {"u1": {"x": [], "y": [' + b"1" * 5000 + b"]}}}",              # tracebacks
     "not a LEAF JSON file (ValueError: Exceeds the limit (4300 digits)"),
])
def test_damaged_femnist_files_name_file_and_user(tmp_path, raw, needle):
    path = tmp_path / "femnist" / "train" / "all_data_0.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    with pytest.raises(UserError) as e:
        source("femnist", tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ") and needle in msg
    assert msg.endswith("regenerate it with LEAF (https://github.com/TalwalkarLab/leaf)")


def test_shakespeare_wrong_types_and_empty_test_user(tmp_path, fmt):
    a = "x" * 80
    fmt.write_leaf(tmp_path / "shakespeare" / "train", [{"R1": ([a], ["y"]), "R2": ([a], ["z"])}])
    fmt.write_leaf(tmp_path / "shakespeare" / "test", [{"R1": ([], []), "R2": ([a], ["q"])}])
    src = source("shakespeare", tmp_path)            # a user without test samples is fine
    assert src.owner.tolist() == [0, 1, 1] and src.is_test.tolist() == [False, False, True]
    fmt.write_leaf(tmp_path / "shakespeare" / "test", [{"R1": ([7], ["y"])}])
    with pytest.raises(UserError, match="user R1: ValueError: Shakespeare inputs and targets "
                                        "must be strings"):
        source("shakespeare", tmp_path)


def test_natural_partition_takes_the_writers_in_the_files(tmp_path, fmt):
    """num_clients: null (data=femnist's default): a LEAF folder sampled with any --sf gives as
    many clients as it has writers, without a hand-set count."""
    from fedmoo.data import federate

    _femnist(tmp_path, fmt)
    fed = federate(source("femnist", tmp_path), {"name": "natural", "seed": 0}, None)
    assert fed.num_clients == 2 and fed.client_names == ["f0000_14", "f0001_02"]
    assert fed.train.sizes.tolist() == [1, 2] and fed.test.sizes.tolist() == [1, 1]
    with pytest.raises(UserError, match="num_clients=3 but this dataset has 2 natural clients"):
        federate(source("femnist", tmp_path), {"name": "natural", "seed": 0}, 3)


def test_a_user_in_two_files_of_a_folder_is_refused(tmp_path, fmt):
    # two LEAF runs (--sf 0.5, --sf 1) in one folder: the last file's samples were taken silently
    fmt.write_leaf(tmp_path / "femnist" / "train", [{"w1": ([_img(0.1)] * 3, [1, 2, 3])},
                                                    {"w1": ([_img(0.2)], [7])}])
    fmt.write_leaf(tmp_path / "femnist" / "test", [{"w1": ([_img(0.2)], [7])}])
    train = tmp_path / "femnist" / "train"
    with pytest.raises(UserError) as e:
        source("femnist", tmp_path)
    assert str(e.value) == (f"{train / 'all_data_1_niid_1_keep_0_train_9.json'}: user w1 is "
                            "also in all_data_0_niid_1_keep_0_train_9.json; keep the files of "
                            "one LEAF run in the folder")


def test_a_folder_named_json_is_not_read_as_a_file(tmp_path, fmt):
    _femnist(tmp_path, fmt)
    (tmp_path / "femnist" / "train" / "copy.json").mkdir()    # was an IsADirectoryError
    assert source("femnist", tmp_path).client_names == ["f0000_14", "f0001_02"]


def test_an_unreadable_leaf_file_names_it(tmp_path, fmt, monkeypatch):
    _femnist(tmp_path, fmt)

    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(UserError, match=r"all_data_0_niid_1_keep_0_train_9.json: cannot be read "
                                        r"\(PermissionError: \[Errno 13\]"):
        source("femnist", tmp_path)
