"""The report commands' checks of what the user gave them: names that are not there (with the
nearest ones: ``did you mean``) and output paths that cannot be written, each one line and exit
status 2 (``fedmoo.errors.UserError``) instead of a traceback or a silently empty column."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator
from pathlib import Path

from fedmoo.errors import UserError


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean test/acc_worst10?`` (the closest known names), else ``''``."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.7)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def require_known(what: str, names: Iterable[str], known: Iterable[str], where: str) -> None:
    """Raise for the first of ``names`` not among ``known``: ``--metric test/acc_wrst10 is
    not a metric of the jobs under DIR; did you mean test/acc_worst10?``."""
    known = list(dict.fromkeys(known))
    for name in names:
        if name not in known:
            raise UserError(f"{what} {name} is not {where}" + did_you_mean(name, known))


@contextlib.contextmanager
def writing(option: str, path: str | Path) -> Iterator[None]:
    """Turn an OSError of writing ``path`` (given as ``option``) into one line."""
    try:
        yield
    except OSError as e:
        why = e.strerror or " ".join(str(e).split())
        raise UserError(f"{option} {path}: cannot write there ({why}); choose a writable "
                        "path") from None


def check_figure(option: str, path: str | None) -> None:
    """A figure file named by ``option``: ``.png``, ``.pdf`` or ``.svg`` (matplotlib refuses
    other suffixes with a traceback, after the work is done)."""
    if path and Path(path).suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UserError(f"{option} {path}: give a .png, .pdf or .svg file")


def check_dpi(dpi: int) -> None:
    """``--dpi`` of a figure: 10 to 2400 (matplotlib refuses 0 with a traceback and runs out of
    memory on a huge one)."""
    if not 10 <= dpi <= 2400:
        raise UserError(f"--dpi {dpi} is out of range; give 10 to 2400 (300 for print)")
