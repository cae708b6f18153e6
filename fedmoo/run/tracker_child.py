"""The child side of a tracker that runs in a process of its own (``python -m
fedmoo.run.tracker_child <writer module>``): the message loop of ``fedmoo.run.mlflow_writer``
and ``fedmoo.run.wandb_writer``.

The run sends JSON lines on stdin: a head (the backend's, and ``log``: the file that takes the
child's stderr), ``{"step": t, "metrics": {...}}`` per rounds.csv row, then ``{"final": {...},
"artifacts": [path, ...]}`` when the run completed; end of input without it ends the tracked
run as failed. The child answers on stdout (and in its log) ``ready <run id>``, ``error
<message>`` or ``done``. Input is read into memory from the start, so the run never waits on a
full pipe; the child runs at nice 10: the training comes first.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import queue
import signal
import sys
import threading
import time

NICE = 10


def say(line: str) -> None:
    """To the run, if it still listens, and to the log."""
    line = line.replace("\n", " ") + "\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    with contextlib.suppress(OSError):      # the run ended: the log has it
        sys.stdout.write(line)
        sys.stdout.flush()


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def serve(writer) -> int:
    """The child's life with the writer module ``writer``: ``warm()`` (imports, while the run
    starts), ``Writer(head)`` (its ``run_id``; ``refusal``: the one line for an exception
    there), ``metrics([(values, step), ...])`` in batches, and ``end(final or None, artifacts)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the run's; it ends us by EOF
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a run that ended: ``say`` goes on
    with contextlib.suppress(OSError):
        os.nice(NICE)
    # the child's session is its own autogroup where Linux has them: without this, it shares
    # the CPU with the run as an equal whatever its nice value
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
        f.write(str(NICE))
    logging.basicConfig(level=logging.WARNING)
    inbox: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            inbox.put(json.loads(line))
        inbox.put(None)

    threading.Thread(target=read, daemon=True).start()
    warm_error = None
    try:
        writer.warm()
    except Exception as e:  # noqa: BLE001 - said when the head asks for the run
        warm_error = e
    head = inbox.get()
    if head is None:            # prestarted and never used
        return 0
    if head.get("log"):     # stderr (MLflow's, W&B's and our lines) appended to it from now on
        fd = os.open(head["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)
        os.close(fd)
    try:
        if warm_error is not None:
            raise warm_error
        backend = writer.Writer(head)
    except Exception as e:  # noqa: BLE001 - every refusal becomes the run's one line
        say("error " + writer.refusal(head, e))
        return 1
    say(f"ready {backend.run_id}")
    # rows are written together: when BATCH metrics wait, FLUSH_S seconds after the oldest
    # came, and at the run's end
    rows: list[tuple[dict[str, float], int]] = []
    due, final = 0.0, None

    def write() -> None:
        if rows:
            backend.metrics(rows)
            rows.clear()

    try:
        while True:
            try:
                msg = inbox.get(timeout=max(0.0, due - time.monotonic()) if rows else None)
            except queue.Empty:
                write()
                continue
            if msg is None:
                break
            if "final" in msg:
                write()
                final = msg
                backend.end(msg["final"], msg.get("artifacts") or [])
                continue
            if not rows:
                due = time.monotonic() + writer.FLUSH_S
            rows.append((msg["metrics"], int(msg["step"])))
            if sum(len(m) for m, _ in rows) >= writer.BATCH:
                write()
        write()
        if final is None:
            backend.end(None, [])
    except Exception as e:  # noqa: BLE001
        say(f"error logger={writer.NAME}: writing failed: {first_line(e)}")
        return 1
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(serve(importlib.import_module(sys.argv[1])))
