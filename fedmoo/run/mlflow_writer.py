"""``logger=mlflow``'s writer: a child process that owns the MLflow run (fedmoo.run.loggers).

Importing MLflow and opening a SQLite store take 5-6 s of CPU (creating a store's schema 10 s
more on a 2-core machine), and every write to a SQLite store commits to disk; in a process of
its own, at a lower priority (nice 10), that work runs beside the training instead of inside
its rounds. The run sends JSON lines on the writer's stdin:

- first ``{"uri", "experiment", "run_name", "tags", "params"}``;
- then ``{"step": t, "metrics": {...}}`` per rounds.csv row (written together, up to 1000
  metrics a ``log_batch``, at most ``FLUSH_S`` seconds after they came: ``Pending``);
- then ``{"final": {...}, "artifact": path}`` when the run completed.

End of input without a final message ends the MLflow run as KILLED (an interrupted, diverged
or failed run). The writer answers on stdout with one line ``ready <run id>`` once the MLflow
run exists, ``error <message>`` when it cannot log (the run stops with that line), and
``done`` at the end. Input is read into memory from the start, so the run never waits on a
full pipe while MLflow is still being imported.

Several jobs may share one SQLite store (``MLFLOW_TRACKING_URI=sqlite:///...``, jobs of a
sweep in parallel): the schema and the experiment are created under a file lock beside the
database (``<db>.lock``), and every write holds it too, so concurrent jobs never race SQLite.
A new SQLite store starts as a copy of an empty one that this MLflow version made once
(``_copy_empty_store``).
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
from contextlib import nullcontext
from pathlib import Path
from typing import Any

BATCH = 100     # MLflow's limit of params (and tags) in one log_batch call
BATCH_METRICS = 1000   # MLflow's limit of metrics in one log_batch call
FLUSH_S = 2.0   # rows wait at most this long before they are written
NICE = 10       # the writer's scheduling priority below the run's (importing MLflow and
                # opening a store take 5-6 s of CPU)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///path`` tracking URI (None for other stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return Path("/" + path.lstrip("/")) if uri.startswith("sqlite:////") else Path(path)


def _say(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def explain(uri: str, e: BaseException) -> str:
    """The one line a user reads when MLflow refuses the tracking store."""
    text = str(e)
    if isinstance(e, ModuleNotFoundError):
        return (f"logger=mlflow: the tracking store {uri} needs the {e.name} package; "
                "pip install -e \".[trackers]\"")
    if "MLFLOW_ALLOW_FILE_STORE" in text:
        return (f"logger=mlflow: MLFLOW_TRACKING_URI={uri} is a file store, which this MLflow "
                "refuses; use a database (MLFLOW_TRACKING_URI=sqlite:///<path>/mlflow.db, or "
                "unset it for <run dir>/mlflow.db) or set MLFLOW_ALLOW_FILE_STORE=true")
    return f"logger=mlflow: tracking store {uri} failed: {_first_line(e)}"


class Writer:
    def __init__(self, head: dict[str, Any]):
        import mlflow
        from filelock import FileLock
        from mlflow.entities import Metric, Param

        for name in ("mlflow", "alembic"):           # their notes (creating tables) stay quiet
            logging.getLogger(name).setLevel(logging.WARNING)
        self.Metric, self.uri = Metric, head["uri"]
        db = sqlite_path(self.uri)
        self.lock = (FileLock(str(db) + ".lock", thread_local=False) if db is not None
                     else nullcontext())
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:     # the schema and the experiment are created once, by one job
            if db is not None and not db.exists():
                _copy_empty_store(db, mlflow)
            self.client = mlflow.MlflowClient(tracking_uri=self.uri)
            exp = self.client.get_experiment_by_name(head["experiment"])
            if exp is not None:
                exp_id = exp.experiment_id
            else:           # artifacts beside the database, one folder per run
                where = None if db is None else (db.parent / "mlartifacts").resolve().as_uri()
                exp_id = self.client.create_experiment(head["experiment"],
                                                       artifact_location=where)
            self.run_id = self.client.create_run(
                exp_id, run_name=head["run_name"],
                tags={k: str(v) for k, v in head["tags"].items()}).info.run_id
            params = [Param(k, str(v)[:500]) for k, v in head["params"].items()]
            for i in range(0, len(params), BATCH):
                self.client.log_batch(self.run_id, params=params[i:i + BATCH])

    def metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        """Rows of (metrics, step), in as few ``log_batch`` calls as MLflow allows."""
        now = int(time.time() * 1000)
        batch = [self.Metric(k, float(v), now, step) for values, step in rows
                 for k, v in values.items()]
        for i in range(0, len(batch), BATCH_METRICS):
            with self.lock:
                self.client.log_batch(self.run_id, metrics=batch[i:i + BATCH_METRICS])

    def end(self, status: str, artifact: str | None = None) -> None:
        with self.lock:
            if artifact and Path(artifact).exists():
                self.client.log_artifact(self.run_id, artifact)
            self.client.set_terminated(self.run_id, status)


def _copy_empty_store(db: Path, mlflow) -> None:
    """A new SQLite store as a copy of an empty one made by this MLflow version once per
    machine (``~/.cache/fedmoo/mlflow-<version>.db``): MLflow builds a new store's schema by
    running its whole migration history, 5-15 s on a 2-core machine, once for every run
    directory otherwise. Where the cache cannot be written, MLflow builds the store itself."""
    import shutil

    from filelock import FileLock

    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedmoo"
    empty = home / f"mlflow-{mlflow.__version__}.db"
    try:
        home.mkdir(parents=True, exist_ok=True)
        with FileLock(str(empty) + ".lock", thread_local=False):
            if not empty.exists():
                making = empty.with_name(f"{empty.name}.{os.getpid()}.tmp")
                making.unlink(missing_ok=True)
                mlflow.MlflowClient(tracking_uri=f"sqlite:///{making}").search_experiments()
                making.replace(empty)
        shutil.copyfile(empty, db)
    except OSError:
        db.unlink(missing_ok=True)


class Pending:
    """Rows received and not yet written. Each ``log_batch`` costs a SQLite transaction and
    MLflow's per-call work (about 24 ms for one row of 40 metrics on a 2-core machine, 9 ms a
    row in a call of 10 rows), so rows are written together: when ``BATCH_METRICS`` metrics
    are waiting, when the oldest has waited ``FLUSH_S`` seconds (the tracker lags the run by
    that much at most), and at the run's end."""

    def __init__(self, writer: Writer):
        self.writer, self.rows, self.since, self.size = writer, [], 0.0, 0

    def next(self, inbox: queue.Queue) -> dict[str, Any] | None:
        """The next message; rows that waited long enough are written while waiting for it."""
        while True:
            wait = None if not self.rows else max(0.0, self.since + FLUSH_S - time.monotonic())
            try:
                return inbox.get(timeout=wait)
            except queue.Empty:
                self.write()

    def add(self, metrics: dict[str, float], step: int) -> None:
        if not self.rows:
            self.since = time.monotonic()
        self.rows.append((metrics, step))
        self.size += len(metrics)
        if self.size >= BATCH_METRICS:
            self.write()

    def write(self) -> None:
        if self.rows:
            self.writer.metrics(self.rows)
        self.rows, self.size = [], 0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the run's; it ends us by EOF
    try:
        os.nice(NICE)     # the training comes first; the writer catches up when it can
    except OSError:
        pass
    logging.basicConfig(level=logging.WARNING)
    inbox: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            inbox.put(json.loads(line))
        inbox.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:        # while the run starts (fedmoo.run.loggers.prestart): MLflow and what opening a
        # SQLite store imports (its SQLAlchemy store, alembic's schema check), 3-4 s of CPU
        import alembic.runtime.migration  # noqa: F401
        import mlflow  # noqa: F401
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    except ImportError:         # said below, with the store that needs it
        pass
    head = inbox.get()
    if head is None:
        return 0
    try:
        writer = Writer(head)
    except Exception as e:  # noqa: BLE001 - every refusal becomes the run's one line
        _say("error " + explain(head["uri"], e))
        return 1
    _say(f"ready {writer.run_id}")
    final = False
    try:
        pending = Pending(writer)
        while (msg := pending.next(inbox)) is not None:
            if "final" in msg:
                pending.write()
                writer.metrics([({f"final/{k}": v for k, v in msg["final"].items()}, 0)])
                writer.end("FINISHED", msg.get("artifact"))
                final = True
            else:
                pending.add(msg["metrics"], int(msg["step"]))
        pending.write()
        if not final:
            writer.end("KILLED")
    except Exception as e:  # noqa: BLE001
        _say(f"error logger=mlflow: writing to {head['uri']} failed: {_first_line(e)}")
        return 1
    _say("done")
    _let_go()
    return 0


def _let_go() -> None:
    """Everything is written: stdout and stderr go to /dev/null, so neither the run nor a pipe
    that reads its output (``fedmoo run ... | tee log``) waits for this process's teardown
    (1.5 s of unloading MLflow and SQLAlchemy)."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


if __name__ == "__main__":
    sys.exit(main())
