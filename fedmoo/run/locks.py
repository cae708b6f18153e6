"""Exclusive locks between processes, with a note of who holds them.

``filelock`` (``flock`` on POSIX) locks: the operating system releases a lock when its process
dies, so a killed job's lock never blocks a later one. A ``<lock>.holder`` note beside it (pid,
host, since when) lets a refused process name the holder; it is informative only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout


class HeldLock:
    """An acquired lock; ``release()`` (or the end of a ``with`` block) frees it."""

    def __init__(self, lock: FileLock, path: Path):
        self._lock, self.path = lock, path

    def release(self) -> None:
        if self._lock.is_locked:
            _holder_file(self.path).unlink(missing_ok=True)
            self._lock.release(force=True)

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def try_lock(path: Path) -> HeldLock | None:
    """Take the lock at ``path`` now, or return None if another process (or another lock object
    of this process) holds it."""
    path = Path(path)
    lock = FileLock(str(path), timeout=0, thread_local=False, is_singleton=False)
    try:
        lock.acquire()
    except Timeout:
        return None
    note = {"pid": os.getpid(), "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    with contextlib.suppress(OSError):      # the note is a courtesy; the lock is what counts
        _holder_file(path).write_text(json.dumps(note))
    return HeldLock(lock, path)


def holder(path: Path) -> str:
    """``pid P on host H since T`` for the process holding ``path``, as far as its note says."""
    try:
        note = json.loads(_holder_file(Path(path)).read_text())
        return f"pid {note['pid']} on host {note['host']} since {note['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (no holder note yet)"


def _holder_file(path: Path) -> Path:
    return path.with_name(path.name + ".holder")
