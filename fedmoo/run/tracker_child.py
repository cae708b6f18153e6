"""The child side of a tracker that runs in a process of its own (fedmoo.run.tracker_process):
the message loop shared by ``fedmoo.run.mlflow_writer`` and ``fedmoo.run.wandb_writer``.

The run sends JSON lines on the child's stdin:

- first a head (the backend's: the run's name, tags, config);
- then ``{"step": t, "metrics": {...}}`` per rounds.csv row;
- then ``{"final": {...}, "artifact": path}`` when the run completed.

End of input without a final message ends the tracked run as failed (an interrupted, diverged
or failed run). The child answers on stdout with one line ``ready <run id>`` once the tracked
run exists, ``error <message>`` when it cannot log (the run stops with that line), and ``done``
at the end. Input is read into memory from the start, so the run never waits on a full pipe
while the child is still importing its tracker. The child runs at a lower priority (nice 10):
the training comes first; the tracker catches up when it can.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from typing import Any, Callable, Protocol

NICE = 10


class Backend(Protocol):
    """One tracked run, opened from the head message."""

    run_id: str

    def metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        """Rows of (metrics, step), in order."""

    def end(self, final: dict[str, float] | None, artifact: str | None) -> None:
        """The run completed (``final``: its final metrics) or, with None, stopped early."""


def say(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class Pending:
    """Rows received and not yet written, written together: when ``batch`` metrics are
    waiting, when the oldest has waited ``flush_s`` seconds (the tracker lags the run by that
    much at most), and at the run's end."""

    def __init__(self, backend: Backend, batch: int, flush_s: float):
        self.backend, self.batch, self.flush_s = backend, batch, flush_s
        self.rows: list[tuple[dict[str, float], int]] = []
        self.since, self.size = 0.0, 0

    def next(self, inbox: queue.Queue) -> dict[str, Any] | None:
        """The next message; rows that waited long enough are written while waiting for it."""
        while True:
            wait = None if not self.rows else max(0.0, self.since + self.flush_s - time.monotonic())
            try:
                return inbox.get(timeout=wait)
            except queue.Empty:
                self.write()

    def add(self, metrics: dict[str, float], step: int) -> None:
        if not self.rows:
            self.since = time.monotonic()
        self.rows.append((metrics, step))
        self.size += len(metrics)
        if self.size >= self.batch:
            self.write()

    def write(self) -> None:
        if self.rows:
            self.backend.metrics(self.rows)
        self.rows, self.size = [], 0


def serve(warm: Callable[[], None], open_run: Callable[[dict[str, Any]], Backend],
          refusal: Callable[[dict[str, Any], BaseException], str], name: str,
          batch: int, flush_s: float) -> int:
    """The child's life: ``warm()`` (imports, while the run starts), then the head opens the
    run (``refusal``: the one line for an exception there), then rows until end of input."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the run's; it ends us by EOF
    try:
        os.nice(NICE)
    except OSError:
        pass
    logging.basicConfig(level=logging.WARNING)
    inbox: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            inbox.put(json.loads(line))
        inbox.put(None)

    threading.Thread(target=read, daemon=True).start()
    warm_error = None
    try:
        warm()
    except Exception as e:  # noqa: BLE001 - said when the head asks for the run
        warm_error = e
    head = inbox.get()
    if head is None:            # prestarted and never used
        return 0
    try:
        if warm_error is not None:
            raise warm_error
        backend = open_run(head)
    except Exception as e:  # noqa: BLE001 - every refusal becomes the run's one line
        say("error " + refusal(head, e))
        return 1
    say(f"ready {backend.run_id}")
    final = None
    try:
        pending = Pending(backend, batch, flush_s)
        while (msg := pending.next(inbox)) is not None:
            if "final" in msg:
                pending.write()
                final = msg
                backend.end(msg["final"], msg.get("artifact"))
            else:
                pending.add(msg["metrics"], int(msg["step"]))
        pending.write()
        if final is None:
            backend.end(None, None)
    except Exception as e:  # noqa: BLE001
        say(f"error logger={name}: writing failed: {first_line(e)}")
        return 1
    say("done")
    let_go()
    return 0


def let_go() -> None:
    """Everything is written: stdout and stderr go to /dev/null, so neither the run nor a pipe
    that reads its output (``fedmoo run ... | tee log``) waits for this process's teardown
    (1.5 s of unloading MLflow and SQLAlchemy)."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)
