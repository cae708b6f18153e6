"""Live experiment tracking next to the CSV files (rounds.csv stays the source of truth).

``logger`` is one name or a list (``logger=[tensorboard,mlflow]``):

- ``none`` (default): nothing extra.
- ``tensorboard``: every numeric column of every rounds.csv row as a scalar (step = the round)
  in ``<run dir>/tensorboard``, on disk within 2 s; at the end the config as hparams with the
  final metrics (``final/<name>``).
- ``mlflow``: an MLflow run in experiment ``fedmoo`` (or ``MLFLOW_EXPERIMENT_NAME``): the
  config as parameters (dotted keys), every row as metrics, the final metrics and, as
  artifacts, summary.json, rounds.csv, clients.csv and ``.hydra/config.yaml``. Tracking URI:
  ``MLFLOW_TRACKING_URI``, else ``<run dir>/mlflow.db`` (fedmoo.run.mlflow_writer).
- ``wandb``: a W&B run in project ``fedmoo`` (or ``WANDB_PROJECT``): the config, every row and
  the final metrics as its summary; files under ``$WANDB_DIR/wandb``, else ``<run dir>/wandb``
  (fedmoo.run.wandb_writer).

A tracked run is named after its overrides and tagged with its run directory and sweep
(``run_label``). Non-finite values are skipped (trackers reject them). A run never waits on a
tracker: MLflow's and W&B's runs are owned by child processes (``ChildTracker``), started before
the run imports torch (``prestart``) and finishing in the background at nice 10 once the run's
files are complete, with their log in ``<run dir>/tracker-<name>.log``. A tracker that cannot
start stops the run (a UserError); one that fails after it started is one warning, and the run
goes on without it (``Trackers``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError
from fedmoo.run.tracker_child import first_line
from fedmoo.report.jobs import flatten
from fedmoo.config.schema import LOGGERS

FLUSH_S = 2   # TensorBoard's events reach the disk at most this late
SWEEP_ENV = "FEDMOO_SWEEP_DIR"   # set by the sweep report callback while a sweep runs,
SWEPT_ENV = "FEDMOO_SWEPT_KEYS"  # with the keys the sweep varies (``seed,algo``)
log = logging.getLogger(__name__)


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k != "round" and not isinstance(v, bool)
            and isinstance(v, (int, float)) and math.isfinite(v)}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _need(name: str) -> None:
    """A UserError naming the extra to install when tracker ``name``'s package is missing."""
    if not _installed(name):
        raise UserError(f"logger={name} needs the {name} package; pip install -e "
                        f"\".[{'tensorboard' if name == 'tensorboard' else 'trackers'}]\" "
                        "or drop it from logger")


class NullLogger:
    def log(self, row: dict[str, Any]) -> None:
        pass

    def check(self) -> None:
        """Before the run writes its completed result: raise the tracker's failure, if any."""

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(NullLogger):
    """Events in ``<run dir>/tensorboard``, written by TensorBoard's own event writer: one event
    per rounds.csv row holding all its values (about a tenth of the time of one
    ``SummaryWriter.add_scalar`` per value: ``scripts/bench_trackers.py``), and at the end the
    config as hparams."""

    def __init__(self, run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str]):
        _need("tensorboard")
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        # its own thread writes the events, on disk within FLUSH_S seconds (and at the end)
        self.events = EventFileWriter(str(Path(run_dir) / "tensorboard"), flush_secs=FLUSH_S)
        self.cfg, self.Event, self.Summary = cfg, Event, Summary

    def _write(self, step: int, values: list) -> None:
        """One event of ``Summary.Value``s."""
        self.events.add_event(self.Event(wall_time=time.time(), step=step,
                                         summary=self.Summary(value=values)))

    def _scalars(self, values: dict[str, float]) -> list:
        return [self.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]

    def log(self, row: dict[str, Any]) -> None:
        self._write(int(row["round"]), self._scalars(_numbers(row)))

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        """The config as hparams with the final metrics (``final/<name>``), in the run's own
        event file: TensorBoard's HParams view then lists a sweep's runs side by side. No
        experiment header: TensorBoard keeps the first it finds (a FedAvg run's would hide
        FedFV's ``algo.alpha`` in an ``algo=fedavg,fedfv`` sweep); without one it takes the
        union of the runs' hparams, and the metrics from their scalars."""
        from torch.utils.tensorboard.summary import hparams

        params = {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
                  for k, v in flatten(self.cfg).items()}
        metrics = {f"final/{k}": v for k, v in _numbers(final).items()}
        step = int(final.get("round", 0) or 0)
        for summary in hparams(params, metrics)[1:]:     # session start and end, no header
            self._write(0, list(summary.value))
        self._write(step, self._scalars(metrics))
        self.events.flush()

    def close(self) -> None:
        self.events.close()


WRITERS = {"mlflow": "fedmoo.run.mlflow_writer", "wandb": "fedmoo.run.wandb_writer"}
_spare: dict[str, subprocess.Popen] = {}   # children started ahead of their run, by module


def selected(names: str | list[str] | None) -> list[str]:
    """The ``logger`` config key as a list of names."""
    return ["none"] if names is None else [names] if isinstance(names, str) else list(names)


def _spawn(module: str) -> subprocess.Popen:
    """stderr goes nowhere until the head names the child's log: a child finishing in the
    background must not write on the user's terminal, nor keep ``fedmoo run | tee`` waiting;
    in a session of its own, closing the terminal (SIGHUP) does not end it."""
    return subprocess.Popen([sys.executable, "-m", "fedmoo.run.tracker_child", module],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, bufsize=1,
                            start_new_session=True)


def prestart(names: str | list[str] | None) -> None:
    """Start the writer processes of the selected trackers before the run imports torch:
    importing MLflow or W&B (seconds: ``scripts/bench_trackers.py``) then overlaps the run's
    own start-up. A child that is never taken reads end of input when this process ends, and
    ends without touching any store."""
    for n in dict.fromkeys(selected(names)):
        if n in WRITERS and _installed(n) and WRITERS[n] not in _spare:
            _spare[WRITERS[n]] = _spawn(WRITERS[n])


class ChildTracker(NullLogger):
    """A tracker whose run a child process owns (the protocol: fedmoo.run.tracker_child). A
    child that could not start its tracked run raises a UserError (the run stops: a bad store
    or setting); one that fails after, a RuntimeError (``Trackers`` warns and goes on without
    it); after the run's completed result, its error line is a warning (``finish``).
    ``where``: where its data goes, for the user; ``log_file``: the child's log; ``confirm``:
    the user's own store or setting, which the tracker may refuse: the run waits for the
    child's answer before its completed result (``check``)."""

    FILES = ("summary.json", "rounds.csv", "clients.csv", ".hydra/config.yaml")

    def __init__(self, module: str, name: str, head: dict[str, Any], where: str,
                 log_file: Path, confirm: bool):
        self.name, self.where, self.log_file, self.confirm = name, where, log_file, confirm
        self.proc = _spare.pop(module, None) or _spawn(module)
        self.error: str | None = None             # the child's error line
        self.started = False                      # its ready line came: the tracked run exists
        self.answered = threading.Event()         # its first line came: ready or error
        self.ended = threading.Event()            # its last line came: done or error
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.done = False
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
        self._send({"step": int(row["round"]), "metrics": _numbers(row)})

    def check(self) -> None:
        """A child that refused its run stops the run. Unless ``confirm``, one still starting
        does not keep the run waiting (the default store, offline W&B: nothing to refuse)."""
        if self.confirm:
            self.answered.wait()
        if self.answered.is_set() and (self.error or self.proc.poll() not in (None, 0)):
            raise self._stopped()

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        with contextlib.suppress(Exception):      # said below
            self._send({"final": _numbers(final),
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
        if not self.done:
            self.done = True
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


def _mlflow(run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str]) -> ChildTracker:
    """The MLflow run (fedmoo.run.mlflow_writer)."""
    _need("mlflow")
    uri = (os.environ.get("MLFLOW_TRACKING_URI")
           or f"sqlite:///{(Path(run_dir) / 'mlflow.db').resolve()}")
    return ChildTracker(WRITERS["mlflow"], "mlflow", {
        "uri": uri, "experiment": os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedmoo"),
        "run_name": name, "tags": tags,
        "params": {k: str(v)[:500] for k, v in flatten(cfg).items()}},
        uri, Path(run_dir) / "tracker-mlflow.log",
        confirm=bool(os.environ.get("MLFLOW_TRACKING_URI")))


def _wandb(run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str]) -> ChildTracker:
    """The W&B run (fedmoo.run.wandb_writer); a sweep's runs are one group (``sweep_name``)."""
    _need("wandb")
    where = Path(os.environ.get("WANDB_DIR") or run_dir)
    (where / "wandb").mkdir(parents=True, exist_ok=True)
    project = os.environ.get("WANDB_PROJECT", "fedmoo")
    return ChildTracker(WRITERS["wandb"], "wandb", {
        "project": project, "name": name, "group": sweep_name(tags.get("fedmoo.sweep")),
        "dir": str(where), "config": cfg},
        f"W&B project {project} (files in {where / 'wandb'})",
        Path(run_dir) / "tracker-wandb.log",
        confirm=os.environ.get("WANDB_MODE") not in ("offline", "disabled"))


def sweep_name(sweep: str | None) -> str | None:
    """A sweep's W&B group: its directory's name, not its path (machine-specific, W&B allows
    128 characters); with its date folder when the name is Hydra's time of day (``2026-11-28/
    08-37-37``), so that sweeps of different days stay apart."""
    if not sweep:
        return None
    path = Path(sweep)
    name = f"{path.parent.name}/{path.name}" if re.fullmatch(r"[\d-]+", path.name) else path.name
    return name[-128:]


class Trackers(NullLogger):
    """The run's trackers, by name. One that fails once it started (its writer stops, its disk
    fills up) is one warning and is dropped: the run goes on, rounds.csv stays the record. A
    UserError (a tracker that could not start: a bad store or setting) stops the run."""

    def __init__(self, members: dict[str, NullLogger]):
        self.members = members

    def _each(self, method: str, *args: Any) -> None:
        for name, m in list(self.members.items()):
            try:
                getattr(m, method)(*args)
            except UserError:
                raise
            except Exception as e:  # noqa: BLE001 - whatever a tracker's own failure is
                del self.members[name]
                log.warning("logger=%s stopped: %s; the run goes on without it (rounds.csv has "
                            "every round)", name, first_line(e))
                with contextlib.suppress(Exception):
                    m.close()

    def log(self, row: dict[str, Any]) -> None:
        self._each("log", row)

    def check(self) -> None:
        self._each("check")

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        self._each("finish", final, run_dir)

    def close(self) -> None:
        for m in self.members.values():
            m.close()


KINDS = {"tensorboard": TensorBoardLogger, "mlflow": _mlflow, "wandb": _wandb}


def build(names: str | list[str] | None, run_dir: Path, cfg: dict[str, Any] | None = None,
          overrides: list[str] | None = None) -> NullLogger:
    """The trackers selected by the ``logger`` config key. ``overrides``: the job's command-line
    overrides; they name the tracked run (``algo=fedfv seed=1``; the run directory's name
    without any)."""
    names = selected(names)
    for n in names:
        if n not in LOGGERS:
            raise UserError(f"logger={n!r} is not valid; choose one or a list of: "
                            f"{', '.join(LOGGERS)}")
    members: dict[str, NullLogger] = {}
    name, tags = run_label(Path(run_dir), overrides)
    try:
        for n in dict.fromkeys(n for n in names if n != "none"):
            members[n] = KINDS[n](Path(run_dir), cfg or {}, name, tags)
    except BaseException:
        Trackers(members).close()
        raise
    return Trackers(members)


def run_label(run_dir: Path, overrides: list[str] | None) -> tuple[str, dict[str, str]]:
    """A tracked run's name and tags: its overrides (Hydra's own left out; in a sweep, those
    of the keys the sweep varies), the run directory and, in a sweep, the sweep's directory."""
    given = [o for o in overrides or [] if not o.lstrip("+~").startswith("hydra")]
    swept = [k for k in os.environ.get(SWEPT_ENV, "").split(",") if k]
    shown = [o for o in given if o.lstrip("+~").split("=", 1)[0] in swept] or given
    tags = {"fedmoo.run_dir": str(Path(run_dir).resolve())}
    if given:
        tags["fedmoo.overrides"] = " ".join(given)
    if os.environ.get(SWEEP_ENV):
        tags["fedmoo.sweep"] = os.environ[SWEEP_ENV]
    return (" ".join(shown) or Path(run_dir).name)[:250], tags
