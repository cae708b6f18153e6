"""Image-folder datasets of the AdaFed appendix: CINIC-10 and Tiny-ImageNet.

- CINIC-10: ``data_dir/cinic10/{train,valid,test}/<class>/*.png`` (32x32 RGB, 10 classes,
  90,000 images per split). ``valid`` is added to training when ``use_valid`` is true.
- Tiny-ImageNet: ``data_dir/tiny-imagenet-200/`` with ``wnids.txt``,
  ``train/<wnid>/images/*.JPEG`` and ``val/images/*.JPEG`` labelled by ``val/val_annotations.txt``
  (tab separated: file, wnid, box). The unlabelled ``test/`` folder is not used; ``val`` is the
  test split. 64x64 RGB, 200 classes.

Images are decoded once and cached as tensors under ``data_dir``; normalisation is per channel
with the training split's mean and std (``standard``) or ``unit``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedmoo.data import pixels
from fedmoo.data.cache import cached
from fedmoo.data.download import Resource, ensure
from fedmoo.data.federated import Source

CINIC_URL = Resource("https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",
                     extract=True)
TINY_URL = Resource("http://cs231n.stanford.edu/tiny-imagenet-200.zip", extract=True)
IMAGE_EXT = {".png", ".jpg", ".jpeg"}


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXT)


def _decode(paths: list[Path]) -> np.ndarray:
    from PIL import Image

    arrs = [np.asarray(Image.open(p).convert("RGB"), np.uint8).transpose(2, 0, 1) for p in paths]
    return np.stack(arrs) if arrs else np.zeros((0, 3, 1, 1), np.uint8)


def _source(items: list[tuple[Path, int, bool]], classes: list[str], normalize: str) -> Source:
    x = _decode([p for p, _, _ in items])
    y = np.array([c for _, c, _ in items], np.int64)
    is_test = np.array([t for _, _, t in items], bool)
    return Source(x=pixels.normalize(x, is_test, normalize), y=torch.from_numpy(y),
                  is_test=torch.from_numpy(is_test), num_classes=len(classes),
                  input_shape=tuple(x.shape[1:]), class_names=classes)


def load_cinic10(data_dir: Path, normalize: str = "standard", use_valid: bool = False,
                 download: bool = True) -> Source:
    root = data_dir / "cinic10"
    ensure("cinic10", root, [CINIC_URL], root, download,
           lambda: (root / "train").is_dir() and (root / "test").is_dir())
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    splits = [("train", False), ("test", True)] + ([("valid", False)] if use_valid else [])
    items = [(p, c, is_test) for split, is_test in splits
             for c, name in enumerate(classes) for p in _images(root / split / name)]
    return cached(data_dir, "cinic10", {"normalize": normalize, "use_valid": use_valid},
                  [p for p, _, _ in items], lambda: _source(items, classes, normalize))


def load_tinyimagenet(data_dir: Path, normalize: str = "standard", download: bool = True) -> Source:
    root = data_dir / "tiny-imagenet-200"
    ann = root / "val" / "val_annotations.txt"
    ensure("tinyimagenet", root, [TINY_URL], data_dir, download,
           lambda: (root / "wnids.txt").is_file() and ann.is_file())
    classes = (root / "wnids.txt").read_text().split()
    index = {w: i for i, w in enumerate(classes)}
    items = [(p, index[w], False) for w in classes
             for p in _images(root / "train" / w / "images")]
    for line in ann.read_text().splitlines():
        if line.strip():
            fname, wnid = line.split("\t")[:2]
            items.append((root / "val" / "images" / fname, index[wnid], True))
    return cached(data_dir, "tinyimagenet", {"normalize": normalize},
                  [p for p, _, _ in items], lambda: _source(items, classes, normalize))
