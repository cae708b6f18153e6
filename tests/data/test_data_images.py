"""CelebA text files + JPEGs, CINIC-10 and Tiny-ImageNet folders, scikit-learn digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedmoo import data as fdata
from fedmoo.data.celeba import read_table
from fedmoo.data.federated import Source
from fedmoo.errors import UserError
from tests.data.sources import source
from tests.conftest import declare_impl

ATTRS = ["5_o_Clock_Shadow", "Arched_Eyebrows"] + [f"A{i}" for i in range(37)] + ["Young"]
ATTRS[31] = "Smiling"


def _png(path, value, size=(32, 32), fmt="PNG"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (value, value, value)).save(path, fmt)


def _celeba(root):
    d = root / "celeba"
    names = [f"{i:06d}.jpg" for i in range(1, 5)]
    rows = []
    for i, n in enumerate(names):
        vals = ["1" if (j + i) % 2 else "-1" for j in range(40)]
        rows.append(n + " " + " ".join(f"{v:>2}" for v in vals))
        _png(d / "img_align_celeba" / n, 50 * i, (178, 218), "JPEG")
    (d / "list_attr_celeba.txt").write_text("4\n" + " ".join(ATTRS) + " \n" + "\n".join(rows) + "\n")
    (d / "list_eval_partition.txt").write_text(
        "\n".join(f"{n} {p}" for n, p in zip(names, [0, 1, 2, 0])) + "\n")
    (d / "identity_CelebA.txt").write_text(
        "\n".join(f"{n} {c}" for n, c in zip(names, [2880, 7, 7, 2880])) + "\n")
    return d


def test_celeba_attribute_target_split_and_identity(tmp_path):
    _celeba(tmp_path)
    cols, files, _ = read_table(tmp_path / "celeba" / "list_attr_celeba.txt", header=True)
    assert len(cols) == 40 and files[0] == "000001.jpg"
    src = source("celeba", tmp_path, size=16)
    assert tuple(src.x.shape) == (3, 3, 16, 16)               # the valid image is dropped
    assert src.y.tolist() == [1, 1, 0]                         # Smiling = column 31
    assert src.is_test.tolist() == [False, True, False]
    assert src.owner.tolist() == [1, 0, 1] and src.client_names == ["7", "2880"]
    assert float(src.x[1].mean()) == pytest.approx(100 / 255, abs=0.02)
    _png(tmp_path / "celeba" / "img_align_celeba" / "000003.jpg", 200, (178, 218), "JPEG")
    src = source("celeba", tmp_path, size=16)                  # an image is part of the key
    assert float(src.x[1].mean()) == pytest.approx(200 / 255, abs=0.02)
    multi = source("celeba", tmp_path, target="all", size=8, keep_valid=True)
    assert tuple(multi.y.shape) == (4, 40) and multi.task == "multitask"
    assert multi.y[0, :2].tolist() == [0, 1]


def test_celeba_errors(tmp_path):
    with pytest.raises(UserError, match="data=celeba: files not found"):
        source("celeba", tmp_path)
    _celeba(tmp_path)
    with pytest.raises(UserError, match="data.target='Grumpy'"):
        source("celeba", tmp_path, target="Grumpy")


def test_cinic10_class_folders(tmp_path):
    root = tmp_path / "cinic10"
    for split, k in (("train", 2), ("valid", 1), ("test", 1)):
        for c, name in enumerate(["airplane", "automobile"]):
            for i in range(k):
                _png(root / split / name / f"{split}-{i}.png", 10 * c + i)
    src = source("cinic10", tmp_path, normalize="unit", download=False)
    assert tuple(src.x.shape) == (6, 3, 32, 32) and src.class_names == ["airplane", "automobile"]
    assert src.y.tolist() == [0, 0, 1, 1, 0, 1] and src.is_test.tolist() == [False] * 4 + [True] * 2
    assert float(src.x[3, 0, 0, 0]) == pytest.approx(11 / 255)
    assert len(source("cinic10", tmp_path, use_valid=True, download=False).y) == 8


def test_cinic10_class_folders_are_part_of_the_cache_key(tmp_path):
    root = tmp_path / "cinic10"
    for split in ("train", "test"):
        _png(root / split / "bird" / f"{split}.png", 10)
    assert source("cinic10", tmp_path, download=False).y.tolist() == [0, 0]
    for split in ("train", "test"):
        (root / split / "airplane").mkdir()           # no image yet, but class 0 now
    src = source("cinic10", tmp_path, download=False)  # was the cached entry: labels 0, 0
    assert src.class_names == ["airplane", "bird"] and src.y.tolist() == [1, 1]


def test_cinic10_hidden_folders_are_no_classes_and_test_classes_come_from_train(tmp_path):
    root = tmp_path / "cinic10"
    for split in ("train", "test"):
        _png(root / split / "bird" / f"{split}.png", 10)
        (root / split / ".ipynb_checkpoints").mkdir()      # was class 0 (bird class 1)
        (root / split / "bird" / f"._{split}.png").write_bytes(b"\0\5\26\7")  # macOS metadata
    src = source("cinic10", tmp_path, download=False)
    assert src.class_names == ["bird"] and src.y.tolist() == [0, 0]
    _png(root / "test" / "cat" / "test.png", 20)            # was dropped silently
    with pytest.raises(UserError) as e:
        source("cinic10", tmp_path, download=False)
    assert str(e.value) == (f"{root / 'test' / 'cat'} is a class folder that train/ does not "
                            "have; re-download the dataset")


def test_a_folder_that_cannot_be_listed_is_one_line(tmp_path, monkeypatch):
    root = tmp_path / "cinic10"
    for split in ("train", "test"):
        _png(root / split / "bird" / f"{split}.png", 10)

    def refuse(self):                     # (root lists a chmod 000 folder, so it is simulated)
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", refuse)
    with pytest.raises(UserError) as e:   # was a traceback
        source("cinic10", tmp_path, download=False)
    assert str(e.value) == ("data=cinic10: cannot read its files (PermissionError: [Errno 13] "
                            f"Permission denied: '{root / 'train'}')")


def test_tinyimagenet_layout_with_val_annotations(tmp_path):
    root = tmp_path / "tiny-imagenet-200"
    wnids = ["n01443537", "n01629819"]
    (root / "val" / "images").mkdir(parents=True)
    (root / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for c, w in enumerate(wnids):
        _png(root / "train" / w / "images" / f"{w}_0.JPEG", 20 * c, (64, 64), "JPEG")
    _png(root / "val" / "images" / "val_0.JPEG", 5, (64, 64), "JPEG")
    (root / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn01629819\t0\t10\t62\t60\n")
    src = source("tinyimagenet", tmp_path, download=False)
    assert tuple(src.x.shape) == (3, 3, 64, 64) and src.num_classes == 2
    assert src.y.tolist() == [0, 1, 1] and src.is_test.tolist() == [False, False, True]
    (root / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn01443537\t0\t10\t62\t60\n")
    assert source("tinyimagenet", tmp_path, download=False).y.tolist() == [0, 1, 0]   # relabelled


def test_digits_real_offline_with_stratified_test_split():
    src = source("digits", None, test_fraction=0.25)
    assert tuple(src.x.shape) == (1797, 1, 8, 8) and float(src.x.max()) == 1.0
    y, t = src.y.numpy(), src.is_test.numpy()
    per_class = np.bincount(y[t], minlength=10) / np.bincount(y, minlength=10)
    assert np.all(np.abs(per_class - 0.25) < 0.01) and t.sum() == 450


def _cinic(tmp_path):
    root = tmp_path / "cinic10"
    for split in ("train", "test"):
        _png(root / split / "airplane" / f"{split}-0.png", 10)
    return root


def test_damaged_or_wrongly_sized_images_name_the_file(tmp_path):
    root = _cinic(tmp_path)
    bad = root / "train" / "airplane" / "train-1.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(UserError, match=f"{bad} is not a readable image .*; re-download"):
        source("cinic10", tmp_path, download=False)
    _png(bad, 3, size=(16, 16))
    with pytest.raises(UserError, match=r"train-1.png is 16x16 pixels, expected 32x32"):
        source("cinic10", tmp_path, download=False)


def _tiny(tmp_path, annotations: str):
    root = tmp_path / "tiny-imagenet-200"
    (root / "val" / "images").mkdir(parents=True)
    (root / "wnids.txt").write_text("n01443537\n")
    _png(root / "train" / "n01443537" / "images" / "t_0.JPEG", 20, (64, 64), "JPEG")
    _png(root / "val" / "images" / "val_0.JPEG", 5, (64, 64), "JPEG")
    (root / "val" / "val_annotations.txt").write_text(annotations)
    return root


@pytest.mark.parametrize("line", ["val_0.JPEG\tn99999999\t0\t1\t2\t3", "val_0.JPEG n01443537",
                                  "../../wnids.txt\tn01443537", "val_9.JPEG\tn01443537"])
def test_tinyimagenet_bad_annotation_line(tmp_path, line):
    root = _tiny(tmp_path, "val_0.JPEG\tn01443537\t0\t1\t2\t3\n" + line + "\n")
    with pytest.raises(UserError) as e:
        source("tinyimagenet", tmp_path, download=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{root / 'val' / 'val_annotations.txt'}:2: ")


def test_tinyimagenet_wnids_not_utf8(tmp_path):
    root = _tiny(tmp_path, "val_0.JPEG\tn01443537\n")
    (root / "wnids.txt").write_bytes(b"n0144\xff3537\n")
    with pytest.raises(UserError, match="wnids.txt:1: byte 5 .0xff. is not UTF-8 text"):
        source("tinyimagenet", tmp_path, download=False)


@pytest.mark.parametrize("old,new,needle", [
    (" 1", " 3", "list_attr_celeba.txt: row 1 holds a value outside [-1, 1]"),
    (" 1", " x", "list_attr_celeba.txt holds a value that is not an integer"),
    (" 1", "", "list_attr_celeba.txt: row 1 (000001.jpg) has 39 values, expected 40"),
    ("4", "5", "list_attr_celeba.txt declares '5' images but lists 4;"),   # were read as
    ("4", "4 x", "list_attr_celeba.txt declares '4 x' images but lists 4;"),   # complete
])
def test_celeba_damaged_attribute_table(tmp_path, old, new, needle):
    d = _celeba(tmp_path)
    lines = (d / "list_attr_celeba.txt").read_text().splitlines()
    row = 0 if old == "4" else 2
    lines[row] = lines[row].replace(old, new, 1)
    (d / "list_attr_celeba.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as e:
        source("celeba", tmp_path, size=8)
    assert "\n" not in str(e.value) and needle in str(e.value)


def test_celeba_image_without_a_partition_row_is_refused(tmp_path):
    d = _celeba(tmp_path)                 # a cut list_eval_partition.txt: its last row lost
    lines = (d / "list_eval_partition.txt").read_text().splitlines()
    (d / "list_eval_partition.txt").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(UserError) as e:   # was: 000004.jpg silently a training image
        source("celeba", tmp_path, size=8)
    assert str(e.value) == (f"{d / 'list_eval_partition.txt'} has no row for 000004.jpg (and 0 "
                            "more images of list_attr_celeba.txt); download it again from "
                            "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html")


def test_celeba_attribute_table_without_header_names_the_file(tmp_path):
    d = _celeba(tmp_path)
    (d / "list_attr_celeba.txt").write_text("4\n")
    with pytest.raises(UserError, match=r"list_attr_celeba.txt has no header \(image count, "):
        source("celeba", tmp_path, size=8)     # was: "data.target='Smiling' is not ..."


@pytest.mark.parametrize("name", ["../../outside.jpg", "/tmp/outside.jpg"])
def test_celeba_image_name_outside_the_image_folder_is_refused(tmp_path, name):
    d = _celeba(tmp_path)                 # was read: ../../outside.jpg as image 000002.jpg
    _png(tmp_path / "outside.jpg", 255, (178, 218), "JPEG")
    for table in ("list_attr_celeba.txt", "list_eval_partition.txt"):
        (d / table).write_text((d / table).read_text().replace("000002.jpg", name))
    with pytest.raises(UserError) as e:
        source("celeba", tmp_path, size=8, keep_valid=True)
    assert str(e.value) == (f"{d / 'list_attr_celeba.txt'}: {name!r} is not a file name of "
                            "img_align_celeba/; download it again from "
                            "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html")


def _bad_source(data_dir):
    return Source(x=torch.zeros(3, 2), y=torch.tensor([0, 1, 5]),
                  is_test=torch.zeros(3, dtype=torch.bool), num_classes=3, input_shape=(2,))


def test_load_source_refuses_labels_outside_num_classes(monkeypatch):
    declare_impl(monkeypatch, "data", "bad", f"{__name__}:_bad_source")
    with pytest.raises(UserError) as e:
        fdata.load_source({"name": "bad"}, ".")
    assert str(e.value).startswith("data=bad: label 5 at row 2 is outside 0..2; its files are "
                                   "damaged")
