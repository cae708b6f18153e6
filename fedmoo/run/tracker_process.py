"""A tracker whose run is owned by a child process (``logger=mlflow``: fedmoo.run.mlflow_writer,
``logger=wandb``: fedmoo.run.wandb_writer; the protocol is in fedmoo.run.tracker_child).

``fedmoo run`` starts the children it will need before it imports torch (``prestart``), so that
importing a tracker (2-4 s of CPU) overlaps the run's own start-up; the run's logger then takes
its child (``ChildTracker``). A child that is never taken reads end of input when this process
ends, and ends without touching any store. The run does not wait for its child: a child still
starting or writing when the run's files are complete finishes in the background, at nice 10
(an MLflow child on a busy machine: 20-90 s of imports and SQLite work the run used to wait
for, docs/PERFORMANCE.md); the run says where its data goes, and the child records how it went
in ``<run dir>/tracker-<name>.log`` (its stderr: MLflow's and W&B's own lines, then ``ready``,
``done`` or ``error ...``). A job in a launcher's worker process (joblib's) still waits: the
worker's end kills its children.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError

log = logging.getLogger(__name__)
_spare: dict[str, subprocess.Popen] = {}   # children started ahead of their run, by module


def _spawn(module: str) -> subprocess.Popen:
    """stderr goes nowhere until the head names the child's log: a child finishing in the
    background must not write on the user's terminal, nor keep ``fedmoo run | tee`` waiting;
    in a session of its own, closing the terminal (SIGHUP) does not end it."""
    return subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            bufsize=1, start_new_session=True)


def prestart(module: str) -> None:
    """Start ``module``'s child now, for the next ``ChildTracker`` of that module."""
    if module not in _spare:
        _spare[module] = _spawn(module)


class ChildTracker:
    """The parent's side: sends the head, each row and the final metrics. A child that could not
    start its tracked run raises a UserError (the run stops: a bad store or setting); one that
    fails after, a RuntimeError (fedmoo.run.loggers warns and goes on without it); after the
    run's completed result, its error line is a warning (``finish``). ``where``: where its data
    goes, for the user; ``log``: the child's log file; ``confirm``: the user's own store or
    setting, which the tracker may refuse: the run waits for the child's answer before its
    completed result (``check``)."""

    def __init__(self, module: str, name: str, head: dict[str, Any], where: str, log: Path,
                 confirm: bool):
        self.name, self.where, self.log, self.confirm = name, where, log, confirm
        self.proc = _spare.pop(module, None) or _spawn(module)
        self.error: str | None = None             # the child's error line
        self.started = False                      # its ready line came: the tracked run exists
        self.answered = threading.Event()         # its first line came: ready or error
        self.ended = threading.Event()            # its last line came: done or error
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.done = False
        self._send({**head, "log": str(log)})

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
        """The child's failure: a UserError before its tracked run started, else a RuntimeError
        (see the class docstring)."""
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

    def log_numbers(self, step: int, metrics: dict[str, float]) -> None:
        self._send({"step": step, "metrics": metrics})

    def check(self) -> None:
        """A child that refused its run stops the run. Unless ``confirm``, one still starting
        does not keep the run waiting (the default store, offline W&B: nothing to refuse)."""
        if self.confirm:
            self.answered.wait()
        if self.answered.is_set() and (self.error or self.proc.poll() not in (None, 0)):
            raise self._stopped()

    def finish_numbers(self, final: dict[str, float], artifacts: list[str]) -> None:
        try:
            self._send({"final": final, "artifacts": artifacts})
        except Exception:  # noqa: BLE001 - said below
            pass
        self.done = True
        self._end_input()
        if multiprocessing.parent_process() is not None:
            self.ended.wait()     # a launcher's worker (joblib's): its end kills its children
        if not self.ended.is_set():
            log.info("logger=%s: the writer (pid %d) sends the last rows to %s in the "
                     "background; %s says when it is done", self.name, self.proc.pid,
                     self.where, self.log)
        elif self.error:                          # the run's own result is complete: a warning
            log.warning("%s", self.error)

    def _end_input(self) -> None:
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def close(self) -> None:
        """Stopped early (interrupted, diverged, failed): end of input, and the child ends the
        tracked run as failed by itself (without keeping a stopping run waiting on it)."""
        if not self.done:
            self._end_input()
