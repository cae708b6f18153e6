"""CelebA aligned faces with their 40 binary attributes (torchvision's ``celeba/`` layout).

``list_attr_celeba.txt`` (image count, the 40 attribute names, then ``000001.jpg -1 1 ...``),
``list_eval_partition.txt`` (``000001.jpg 0``: 0 train, 1 valid, 2 test), the JPEGs in
``img_align_celeba/`` and, optional, ``identity_CelebA.txt`` (the natural clients, one per
celebrity). ``target``: one attribute (2 classes) or ``all`` (a [M, 40] 0/1 matrix, task
``multitask``). Images are resized to ``size`` x ``size`` in [0, 1]; the validation split is
dropped unless ``keep_valid``. Google Drive blocks scripted downloads: fetch it by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmoo.data.cache import cached
from fedmoo.data.checks import open_image, read_text
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

URL = "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html"
FIX = f"download it again from {URL}"


def read_table(path: Path, header: bool, allowed: set[int] | None = None
               ) -> tuple[list[str], list[str], np.ndarray]:
    """(column names, image names, int64 values [rows, columns]) of a CelebA text file, each
    value in ``allowed`` when given; with ``header``, as many rows as its first line says."""
    lines = [ln.split() for ln in read_text(path, FIX).splitlines() if ln.strip()]
    cols: list[str] = []
    if header:
        if len(lines) < 2:
            raise UserError(f"{path} has no header (image count, attribute names); {FIX}")
        count, cols, lines = lines[0], lines[1], lines[2:]
        if count != [str(len(lines))]:       # (a file cut at the end of a line)
            raise UserError(f"{path} declares {' '.join(count)!r} images but lists "
                            f"{len(lines)}; {FIX}")
    width = len(cols) + 1 if header else 2
    for i, ln in enumerate(lines):
        if len(ln) != width:
            raise UserError(f"{path}: row {i + 1} ({ln[0]}) has {len(ln) - 1} values, expected "
                            f"{width - 1}; {FIX}")
    if not lines:
        raise UserError(f"{path} has no rows; {FIX}")
    try:
        vals = np.array([ln[1:] for ln in lines], dtype=np.int64).reshape(len(lines), -1)
    except (ValueError, OverflowError):
        raise UserError(f"{path} holds a value that is not an integer; {FIX}") from None
    if allowed is not None and not np.isin(vals, list(allowed)).all():
        row = int(np.flatnonzero(~np.isin(vals, list(allowed)).all(axis=-1))[0])
        raise UserError(f"{path}: row {row + 1} holds a value outside {sorted(allowed)}; {FIX}")
    return cols, [ln[0] for ln in lines], vals


def _build(root: Path, target: str, size: int, keep_valid: bool) -> Source:
    from PIL import Image

    names_attr, files, attrs = read_table(root / "list_attr_celeba.txt", True, {-1, 1})
    attrs = (attrs + 1) // 2                                    # -1/1 -> 0/1
    _, pfiles, parts = read_table(root / "list_eval_partition.txt", False, {0, 1, 2})
    split = dict(zip(pfiles, parts[:, 0].tolist()))
    if lost := [f for f in files if f not in split]:    # (a cut file: test images as training)
        raise UserError(f"{root / 'list_eval_partition.txt'} has no row for {lost[0]} (and "
                        f"{len(lost) - 1} more images of list_attr_celeba.txt); {FIX}")
    keep = [i for i, f in enumerate(files) if split[f] != 1 or keep_valid]
    ident_path = root / "identity_CelebA.txt"
    owner = names = None
    if ident_path.is_file():
        _, ifiles, ivals = read_table(ident_path, header=False)
        ident = dict(zip(ifiles, ivals[:, 0].tolist()))
        lost = [files[i] for i in keep if files[i] not in ident]
        if lost:
            raise UserError(f"{ident_path} has no identity for {lost[0]}; {FIX}")
        ids = sorted({ident[files[i]] for i in keep})
        pos = {c: k for k, c in enumerate(ids)}
        owner = np.array([pos[ident[files[i]]] for i in keep], np.int64)
        names = [str(c) for c in ids]
    x = np.empty((len(keep), 3, size, size), np.float32)
    for j, i in enumerate(keep):
        img = open_image(root / "img_align_celeba" / files[i], FIX)
        img = img.resize((size, size), Image.BILINEAR)
        x[j] = np.asarray(img, np.float32).transpose(2, 0, 1) / 255.0
    is_test = np.array([split[files[i]] == 2 for i in keep])
    multi = target == "all"
    y = attrs[keep] if multi else attrs[keep, names_attr.index(target)]
    return Source(x=x, y=np.ascontiguousarray(y), is_test=is_test, num_classes=2,
                  input_shape=(3, size, size), owner=owner, client_names=names,
                  class_names=["no", "yes"] if multi else [f"not {target}", target],
                  task="multitask" if multi else "classification",
                  task_names=names_attr if multi else None)


def load(data_dir: Path, *, target: str, size: int, keep_valid: bool) -> Source:
    root = data_dir / "celeba"
    need = [root / "list_attr_celeba.txt", root / "list_eval_partition.txt"]
    if not all(p.is_file() for p in need) or not (root / "img_align_celeba").is_dir():
        raise UserError(f"data=celeba: files not found at {root} (list_attr_celeba.txt, "
                        f"list_eval_partition.txt, img_align_celeba/); download them from {URL} "
                        "(Google Drive; see docs/datasets.md)")
    lines = read_text(root / "list_attr_celeba.txt", FIX).splitlines()
    header = lines[1].split() if len(lines) > 1 else []
    if not header:                  # (not "data.target is not an attribute")
        raise UserError(f"{root / 'list_attr_celeba.txt'} has no header (image count, attribute "
                        f"names); {FIX}")
    if target != "all" and target not in header:
        raise UserError(f"data.target={target!r} is not a CelebA attribute; use one of "
                        f"{', '.join(header)} or all")
    names = [ln.split()[0] for ln in lines[2:] if ln.strip()]
    if bad := [n for n in names if "/" in n]:      # (../x, /x: read from outside the folder)
        raise UserError(f"{root / 'list_attr_celeba.txt'}: {bad[0]!r} is not a file name of "
                        f"img_align_celeba/; {FIX}")
    images = [root / "img_align_celeba" / n for n in names]
    files = need + [p for p in [root / "identity_CelebA.txt"] if p.is_file()] + images
    return cached(data_dir, "celeba", {"target": target, "size": size, "keep_valid": keep_valid},
                  files, lambda: _build(root, target, size, keep_valid))
