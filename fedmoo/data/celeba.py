"""CelebA aligned faces with their 40 binary attributes (torchvision's ``celeba/`` layout).

Files: ``list_attr_celeba.txt`` (line 1: image count, line 2: the 40 attribute names, then
``000001.jpg -1 1 ...``), ``list_eval_partition.txt`` (``000001.jpg 0``; 0 train, 1 valid,
2 test) and the JPEGs in ``img_align_celeba/``. Optional ``identity_CelebA.txt``
(``000001.jpg 2880``) gives the natural clients (one per celebrity).

``target`` is one attribute name (binary classification, 2 classes) or ``all`` (a [M, 40] 0/1
target matrix, task ``multitask``, for multi-objective learning). Images are resized to
``size`` x ``size`` and scaled to [0, 1]; the validation split is dropped (``keep_valid`` keeps it
as training data). The parsed tensors are cached under ``data_dir``. CelebA is distributed via
Google Drive, which blocks scripted downloads: fetch it by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedmoo.data.cache import cached
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

URL = "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html"


def read_table(path: Path, header: bool) -> tuple[list[str], list[str], list[list[str]]]:
    """(column names, image names, rows of values) of a CelebA text file."""
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    cols: list[str] = []
    if header:
        cols, lines = lines[1], lines[2:]
    return cols, [ln[0] for ln in lines], [ln[1:] for ln in lines]


def _build(root: Path, target: str, size: int, keep_valid: bool) -> Source:
    from PIL import Image

    names_attr, files, vals = read_table(root / "list_attr_celeba.txt", header=True)
    attrs = (np.array(vals, dtype=np.int64) + 1) // 2                      # -1/1 -> 0/1
    _, pfiles, pvals = read_table(root / "list_eval_partition.txt", header=False)
    split = dict(zip(pfiles, (int(v[0]) for v in pvals)))
    keep = [i for i, f in enumerate(files) if split.get(f, 0) != 1 or keep_valid]
    ident_path = root / "identity_CelebA.txt"
    owner = names = None
    if ident_path.is_file():
        _, ifiles, ivals = read_table(ident_path, header=False)
        ident = dict(zip(ifiles, (int(v[0]) for v in ivals)))
        ids = sorted({ident[files[i]] for i in keep})
        pos = {c: k for k, c in enumerate(ids)}
        owner = torch.tensor([pos[ident[files[i]]] for i in keep])
        names = [str(c) for c in ids]
    x = np.empty((len(keep), 3, size, size), np.float32)
    for j, i in enumerate(keep):
        img = Image.open(root / "img_align_celeba" / files[i]).convert("RGB")
        img = img.resize((size, size), Image.BILINEAR)
        x[j] = np.asarray(img, np.float32).transpose(2, 0, 1) / 255.0
    is_test = np.array([split.get(files[i], 0) == 2 for i in keep])
    if target == "all":
        y, n_cls, task = attrs[keep], 2, "multitask"
    else:
        y, n_cls, task = attrs[keep, names_attr.index(target)], 2, "classification"
    return Source(x=torch.from_numpy(x), y=torch.from_numpy(np.ascontiguousarray(y)),
                  is_test=torch.from_numpy(is_test), num_classes=n_cls,
                  input_shape=(3, size, size), owner=owner, client_names=names,
                  class_names=["no", "yes"] if target == "all" else [f"not {target}", target],
                  task=task, task_names=names_attr if target == "all" else None)


def load(data_dir: Path, target: str = "Smiling", size: int = 64, keep_valid: bool = False) -> Source:
    root = data_dir / "celeba"
    need = [root / "list_attr_celeba.txt", root / "list_eval_partition.txt"]
    if not all(p.is_file() for p in need) or not (root / "img_align_celeba").is_dir():
        raise UserError(f"data=celeba: files not found at {root} (list_attr_celeba.txt, "
                        f"list_eval_partition.txt, img_align_celeba/); download them from {URL} "
                        "(Google Drive; see docs/datasets.md)")
    header = (root / "list_attr_celeba.txt").read_text().splitlines()[1].split()
    if target != "all" and target not in header:
        raise UserError(f"data.target={target!r} is not a CelebA attribute; use one of "
                        f"{', '.join(header)} or all")
    files = need + [p for p in [root / "identity_CelebA.txt"] if p.is_file()]
    return cached(data_dir, "celeba", {"target": target, "size": size, "keep_valid": keep_valid},
                  files, lambda: _build(root, target, size, keep_valid))
