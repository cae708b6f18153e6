"""``logger=mlflow``'s writer: a child process (fedmoo.run.tracker_child) that owns the MLflow
run, so that importing MLflow and the store's commits run beside the training.

The head message is ``{"uri", "experiment", "run_name", "tags", "params", "resumed"}``; a run
that ends without its final message is KILLED, and its directory's resumed run goes on in it.
Jobs may share one SQLite store: the schema and the experiment are created, and every write
made, under a file lock beside it (``<db>.lock``).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from fedmoo.run import tracker_child

NAME = "mlflow"
PARAMS = 100    # MLflow's limit of params (and tags) in one log_batch call
BATCH = 1000    # MLflow's limit of metrics in one log_batch call
FLUSH_S = 2.0   # rows wait at most this long before they are written


def refusal(head: dict[str, Any], e: BaseException) -> str:
    """The one line a user reads when MLflow refuses the tracking store."""
    uri, text = head["uri"], str(e)
    if isinstance(e, ModuleNotFoundError):
        return (f"logger=mlflow: the tracking store {uri} needs the {e.name} package; "
                "pip install -e \".[trackers]\"")
    if "MLFLOW_ALLOW_FILE_STORE" in text:
        return (f"logger=mlflow: MLFLOW_TRACKING_URI={uri} is a file store, which this MLflow "
                "refuses; use a database (MLFLOW_TRACKING_URI=sqlite:///<path>/mlflow.db, or "
                "unset it for <run dir>/mlflow.db) or set MLFLOW_ALLOW_FILE_STORE=true")
    return f"logger=mlflow: tracking store {uri} failed: {tracker_child.first_line(e)}"


class Writer:
    def __init__(self, head: dict[str, Any]):
        import mlflow
        from filelock import FileLock
        from mlflow.entities import Metric, Param

        for name in ("mlflow", "alembic"):           # their notes (creating tables) stay quiet
            logging.getLogger(name).setLevel(logging.WARNING)
        self.Metric, self.uri = Metric, head["uri"]
        db = None                       # the database file of a sqlite:///path store
        if self.uri.startswith("sqlite:///"):
            path = self.uri[len("sqlite:///"):].split("?", 1)[0]
            db = Path("/" + path.lstrip("/")) if self.uri.startswith("sqlite:////") else Path(path)
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
            run = self._stopped_run(exp_id, head) if head.get("resumed") else None
            if run is not None:      # a resumed run goes on in the tracked run it started
                self.run_id = run.info.run_id
                self.client.update_run(self.run_id, status="RUNNING")
                return
            self.run_id = self.client.create_run(
                exp_id, run_name=head["run_name"],
                tags={k: str(v) for k, v in head["tags"].items()}).info.run_id
            params = [Param(k, v) for k, v in head["params"].items()]   # cut to 500 by the parent
            for i in range(0, len(params), PARAMS):
                self.client.log_batch(self.run_id, params=params[i:i + PARAMS])

    def _stopped_run(self, exp_id: str, head: dict[str, Any]):
        """The latest run of this run directory, if it did not finish (None otherwise, and for
        a directory whose path has a quote, which MLflow's filter cannot take)."""
        where = head["tags"]["fedmoo.run_dir"]
        runs = "'" not in where and self.client.search_runs(
            [exp_id], f"tags.`fedmoo.run_dir` = '{where}'",
            order_by=["attributes.start_time DESC"], max_results=1)
        return runs[0] if runs and runs[0].info.status != "FINISHED" else None

    def metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        """Rows of (metrics, step), in as few ``log_batch`` calls as MLflow allows."""
        now = int(time.time() * 1000)
        batch = [self.Metric(k, float(v), now, step) for values, step in rows
                 for k, v in values.items()]
        for i in range(0, len(batch), BATCH):
            with self.lock:
                self.client.log_batch(self.run_id, metrics=batch[i:i + BATCH])

    def end(self, final: dict[str, float] | None, artifacts: list[str]) -> None:
        """FINISHED with the final metrics (``final/<name>``) and the run's files as artifacts
        (``<artifact root>/<run id>/artifacts/<file name>``), else KILLED."""
        if final is not None:
            self.metrics([({f"final/{k}": v for k, v in final.items()}, 0)])
        with self.lock:
            for path in artifacts:
                if Path(path).exists():
                    self.client.log_artifact(self.run_id, path)
            self.client.set_terminated(self.run_id, "KILLED" if final is None else "FINISHED")


def _copy_empty_store(db: Path, mlflow) -> None:
    """A new SQLite store as a copy of an empty one made by this MLflow version once per
    machine (``~/.cache/fedmoo/mlflow-<version>.db``), not by MLflow's whole migration history
    (5-15 s) for every run directory. Where the cache cannot be written, MLflow builds it."""
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


def warm() -> None:
    """What opening a SQLite store imports (MLflow, its SQLAlchemy store, alembic's schema
    check: 3-4 s of CPU), while the run starts."""
    import alembic.runtime.migration  # noqa: F401
    import mlflow  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
