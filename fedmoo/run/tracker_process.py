"""A tracker whose run is owned by a child process (fedmoo.run.tracker_child's protocol).

A run never waits on a tracker: its children start before it imports torch (``prestart``), and
finish in the background once the run's files are complete, with their log in ``<run
dir>/tracker-<name>.log``. A child never taken ends without touching any store. A job in a
launcher's worker process (joblib's) still waits: the worker's end kills its children.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError

log = logging.getLogger(__name__)
_spare: dict[str, subprocess.Popen] = {}   # children started ahead of their run, by module
WRITERS = {"mlflow": "fedmoo.run.mlflow_writer", "wandb": "fedmoo.run.wandb_writer"}


def numbers(row: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a rounds.csv row but its round (trackers reject the others)."""
    return {k: float(v) for k, v in row.items() if k != "round" and not isinstance(v, bool)
            and isinstance(v, (int, float)) and math.isfinite(v)}


def _spawn(module: str) -> subprocess.Popen:
    """stderr goes nowhere until the head names the child's log: a child finishing in the
    background must not write on the user's terminal, nor keep ``fedmoo run | tee`` waiting;
    in a session of its own, closing the terminal (SIGHUP) does not end it."""
    return subprocess.Popen([sys.executable, "-m", "fedmoo.run.tracker_child", module],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, bufsize=1,
                            start_new_session=True)


def prestart(module: str) -> None:
    """Start ``module``'s child now, for the next ``ChildTracker`` of that module."""
    if module not in _spare:
        _spare[module] = _spawn(module)


class ChildTracker:
    """A tracker whose run a child process owns (the protocol: fedmoo.run.tracker_child). A
    child that could not start its tracked run raises a UserError; one that fails after, a
    RuntimeError (``Trackers`` goes on without it). ``where``: where its data goes, for the
    user; ``confirm``: a store or setting of the user's, which the tracker may refuse: the run
    waits for the child's answer before its completed result (``check``)."""

    FILES = ("summary.json", "rounds.csv", "clients.csv", ".hydra/config.yaml")

    def __init__(self, name: str, head: dict[str, Any], where: str, run_dir: Path, confirm: bool):
        self.name, self.where, self.confirm = name, where, confirm
        self.log_file = log_file = Path(run_dir) / f"tracker-{name}.log"
        self.proc = _spare.pop(WRITERS[name], None) or _spawn(WRITERS[name])
        self.error: str | None = None             # the child's error line
        self.started = False                      # its ready line came: the tracked run exists
        self.answered = threading.Event()         # its first line came: ready or error
        self.ended = threading.Event()            # its last line came: done or error
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self._send({**head, "log": str(log_file)})

    def _read(self) -> None:
        for line in self.proc.stdout:
            word, _, rest = line.rstrip("\n").partition(" ")
            self.started = self.started or word == "ready"
            if word == "error":
                self.error = rest
            if word in ("ready", "error"):
                self.answered.set()
            if word in ("done", "error"):
                self.ended.set()
        self.answered.set()                       # the child ended
        self.ended.set()

    def _stopped(self) -> Exception:
        """The child's failure: a UserError before its tracked run started, else a
        RuntimeError."""
        if self.error is None:                    # no line yet: its last one, or its status
            self.proc.wait()
            self.reader.join()
        text = self.error or (f"logger={self.name}: the {self.name} writer stopped (exit status "
                              f"{self.proc.returncode})")
        return (RuntimeError(text.removeprefix(f"logger={self.name}: ")) if self.started
                else UserError(text))

    def _send(self, msg: dict[str, Any]) -> None:
        if self.error:
            raise self._stopped()
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):     # the child ended: its last line says why
            raise self._stopped() from None

    def log(self, row: dict[str, Any]) -> None:
        self._send({"step": int(row["round"]), "metrics": numbers(row)})

    def check(self) -> None:
        """A child that refused its run stops the run. Unless ``confirm``, one still starting
        does not keep the run waiting (the default store, offline W&B: nothing to refuse)."""
        if self.confirm:
            self.answered.wait()
        if self.answered.is_set() and (self.error or self.proc.poll() not in (None, 0)):
            raise self._stopped()

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        with contextlib.suppress(Exception):      # said below
            self._send({"final": numbers(final),
                        "artifacts": [str(Path(run_dir) / f) for f in self.FILES]})
        self.close()
        if multiprocessing.parent_process() is not None:
            self.ended.wait()     # a launcher's worker (joblib's): its end kills its children
        if not self.ended.is_set():
            log.info("logger=%s: the writer (pid %d) sends the last rows to %s in the "
                     "background; %s says when it is done", self.name, self.proc.pid,
                     self.where, self.log_file)
        elif self.error:                          # the run's own result is complete: a warning
            log.warning("%s", self.error)

    def close(self) -> None:
        """End of input: without a final message the child ends the tracked run as failed by
        itself (a stopping run never waits on it)."""
        with contextlib.suppress(OSError):     # closing it twice is a no-op
            self.proc.stdin.close()
