"""Image-folder datasets of the AdaFed appendix, decoded once and cached as tensors.

- CINIC-10: ``data_dir/cinic10/{train,valid,test}/<class>/*.png`` (32x32 RGB); ``valid`` joins
  training when ``use_valid`` is true.
- Tiny-ImageNet: ``data_dir/tiny-imagenet-200/`` with ``wnids.txt``, ``train/<wnid>/images/`` and
  ``val/images/`` labelled by ``val/val_annotations.txt`` (file, wnid, box; tab separated), the
  test split. A bad image, annotation line or missing folder is a UserError naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmoo.data import pixels
from fedmoo.data.cache import cached
from fedmoo.data.checks import open_image, read_text
from fedmoo.data.download import Resource, ensure
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

# Neither publisher lists an md5 on its page; these are the archives' md5s as pinned by many
# independent public loaders of both datasets (the same value in each).
CINIC_URL = Resource("https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",
                     "6ee4d0c996905fe93221de577967a372", extract=True)
TINY_URL = Resource("https://cs231n.stanford.edu/tiny-imagenet-200.zip",
                    "90528d7ca1a48142e341f4ef8d21d0de", extract=True)
FIX = "re-download the dataset"
IMAGE_EXT = {".png", ".jpg", ".jpeg"}


def _images(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise UserError(f"{folder} is missing or not a folder; {FIX}")
    return sorted(p for p in folder.iterdir()     # (._x.png: metadata a macOS copy leaves)
                  if p.suffix.lower() in IMAGE_EXT and not p.name.startswith("."))


def _classes(folder: Path) -> list[str]:
    """The class folders of a split (a hidden one, such as .ipynb_checkpoints, is no class)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.is_dir() and not p.name.startswith(".")) if folder.is_dir() else []


def _source(items: list[tuple[Path, int, bool]], classes: list[str], normalize: str,
            size: tuple[int, int]) -> Source:
    arrs = [np.asarray(open_image(p, FIX, size), np.uint8).transpose(2, 0, 1) for p, _, _ in items]
    x = np.stack(arrs) if arrs else np.zeros((0, 3, 1, 1), np.uint8)
    y = np.array([c for _, c, _ in items], np.int64)
    is_test = np.array([t for _, _, t in items], bool)
    return Source(x=pixels.normalize(x, is_test, normalize), y=y, is_test=is_test,
                  num_classes=len(classes), input_shape=tuple(x.shape[1:]), class_names=classes)


def load_cinic10(data_dir: Path, *, normalize: str, use_valid: bool, download: bool) -> Source:
    root = data_dir / "cinic10"
    ensure("cinic10", root, [CINIC_URL], root, download,
           lambda: (root / "train").is_dir() and (root / "test").is_dir())
    classes = _classes(root / "train")
    splits = [("train", False), ("test", True)] + ([("valid", False)] if use_valid else [])
    for split, _ in splits[1:]:        # (its images were dropped silently)
        if extra := sorted(set(_classes(root / split)) - set(classes)):
            raise UserError(f"{root / split / extra[0]} is a class folder that train/ does not "
                            f"have; {FIX}")
    items = [(p, c, is_test) for split, is_test in splits
             for c, name in enumerate(classes) for p in _images(root / split / name)]
    return cached(data_dir, "cinic10",        # (the classes number the labels: in the key)
                  {"normalize": normalize, "use_valid": use_valid, "classes": classes},
                  [p for p, _, _ in items],
                  lambda: _source(items, classes, normalize, (32, 32)))


def load_tinyimagenet(data_dir: Path, *, normalize: str, download: bool) -> Source:
    root = data_dir / "tiny-imagenet-200"
    ann = root / "val" / "val_annotations.txt"
    ensure("tinyimagenet", root, [TINY_URL], data_dir, download,
           lambda: (root / "wnids.txt").is_file() and ann.is_file())
    classes = read_text(root / "wnids.txt", FIX).split()
    index = {w: i for i, w in enumerate(classes)}
    items = [(p, index[w], False) for w in classes
             for p in _images(root / "train" / w / "images")]
    for lineno, line in enumerate(read_text(ann, FIX).splitlines(), 1):
        if line.strip():
            fields = line.split("\t")
            image = root / "val" / "images" / fields[0]
            if len(fields) < 2 or fields[1] not in index or "/" in fields[0] \
                    or not image.is_file():
                raise UserError(f"{ann}:{lineno}: expected 'file<TAB>wnid' naming an image of "
                                f"val/images and a wnid of wnids.txt, got {line[:80]!r}; {FIX}")
            items.append((image, index[fields[1]], True))
    return cached(data_dir, "tinyimagenet", {"normalize": normalize},
                  [root / "wnids.txt", ann] + [p for p, _, _ in items],
                  lambda: _source(items, classes, normalize, (64, 64)))
