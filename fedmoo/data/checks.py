"""Checks shared by the loaders: a damaged data file ends in one ``UserError`` line naming the
file (and the line, row or user where it helps) and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmoo.errors import UserError

MAX_PIXELS = 4096 * 4096   # an image larger than this is refused before it is decoded


def reason(e: BaseException) -> str:
    """The first line of an exception's message (its type name when empty)."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def read_text(path: Path, fix: str) -> str:
    """``path`` decoded as UTF-8; a file that cannot be read or a byte that is not UTF-8 is a
    UserError naming the file (and the line)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:         # no permission, an I/O error
        raise UserError(f"{path} cannot be read ({reason(e)}); {fix}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path}:{line}: byte {e.start} ({data[e.start]:#04x}) is not UTF-8 "
                        f"text; {fix}") from None


def check_labels(y: np.ndarray, num_classes: int, where: str, fix: str) -> None:
    """Refuse integer labels outside ``0..num_classes-1`` (at load time, not in round 1)."""
    bad = np.argwhere((y < 0) | (y >= num_classes))
    if len(bad):
        raise UserError(f"{where}: label {int(y[tuple(bad[0])])} at row {int(bad[0][0])} is "
                        f"outside 0..{num_classes - 1}; {fix}")


def open_image(path: Path, fix: str, size: tuple[int, int] | None = None):
    """A decoded RGB PIL image; unreadable, oversized or (with ``size``) wrongly sized images
    are a UserError naming the file."""
    from PIL import Image

    try:
        img = Image.open(path)
        w, h = img.size
        if w * h <= MAX_PIXELS and (size is None or (w, h) == tuple(size)):
            return img.convert("RGB")
    except Exception as e:  # noqa: BLE001 - PIL raises many types for damaged images
        raise UserError(f"{path} is not a readable image ({reason(e)}); {fix}") from None
    want = f"{size[0]}x{size[1]}" if size else f"at most {MAX_PIXELS} pixels"
    raise UserError(f"{path} is {w}x{h} pixels, expected {want}; {fix}")
