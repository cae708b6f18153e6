"""Live experiment tracking next to the CSV files (rounds.csv stays the source of truth).

``logger`` is one name or a list (``logger=[tensorboard,mlflow]``) of ``none`` (default),
``tensorboard`` (``<run dir>/tensorboard``), ``mlflow`` (fedmoo.run.mlflow_writer) and
``wandb`` (fedmoo.run.wandb_writer): every rounds.csv row's finite numbers (trackers reject the
others), the config and the final metrics. A tracked run is named after its overrides and
tagged with its run directory and sweep (``run_label``). MLflow's and W&B's runs are owned by
child processes, so that a run never waits on them (fedmoo.run.tracker_process). A tracker that
cannot start stops the run (a UserError); one that fails after it started is one warning, and
the run goes on without it (``Trackers``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError
from fedmoo.run.launchers import plugin_available
from fedmoo.run import tracker_process
from fedmoo.run.tracker_child import first_line
from fedmoo.run.tracker_process import WRITERS, ChildTracker, numbers
from fedmoo.report.jobs import flatten

FLUSH_S = 2   # TensorBoard's events reach the disk at most this late
SWEEP_ENV = "FEDMOO_SWEEP_DIR"   # set by the sweep report callback while a sweep runs,
SWEPT_ENV = "FEDMOO_SWEPT_KEYS"  # with the keys the sweep varies (``seed,algo``)
log = logging.getLogger(__name__)


def _need(name: str) -> None:
    """A UserError naming the extra to install when tracker ``name``'s package is missing."""
    if not plugin_available(name):
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
    """Events in ``<run dir>/tensorboard`` by TensorBoard's own event writer: one event per
    rounds.csv row (a tenth of the time of ``add_scalar`` per value), at the end the config as
    hparams."""

    def __init__(self, run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str],
                 resumed: bool = False):      # a resumed run's events join the folder's
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
        self._write(int(row["round"]), self._scalars(numbers(row)))

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        """The config as hparams with the final metrics (``final/<name>``). No experiment
        header: TensorBoard keeps the first it finds (hiding FedFV's ``algo.alpha`` in an
        ``algo=fedavg,fedfv`` sweep); without one it takes the union of the runs' hparams."""
        from torch.utils.tensorboard.summary import hparams

        params = {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
                  for k, v in flatten(self.cfg).items()}
        metrics = {f"final/{k}": v for k, v in numbers(final).items()}
        step = int(final.get("round", 0) or 0)
        for summary in hparams(params, metrics)[1:]:     # session start and end, no header
            self._write(0, list(summary.value))
        self._write(step, self._scalars(metrics))
        self.events.flush()

    def close(self) -> None:
        self.events.close()


def selected(names: str | list[str] | None) -> list[str]:
    """The ``logger`` config key as a list of names."""
    return ["none"] if names is None else [names] if isinstance(names, str) else list(names)


def prestart(names: str | list[str] | None) -> None:
    """Start the writer processes of the selected trackers before the run imports torch
    (fedmoo.run.tracker_process): importing MLflow or W&B (seconds) then overlaps the run's own
    start-up."""
    for n in dict.fromkeys(selected(names)):
        if n in WRITERS and plugin_available(n):
            tracker_process.prestart(WRITERS[n])


def _mlflow(run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str],
            resumed: bool = False) -> ChildTracker:
    """The MLflow run (fedmoo.run.mlflow_writer); a resumed run's goes on in the one its
    directory started."""
    _need("mlflow")
    uri = (os.environ.get("MLFLOW_TRACKING_URI")
           or f"sqlite:///{(Path(run_dir) / 'mlflow.db').resolve()}")
    return ChildTracker("mlflow", {
        "uri": uri, "experiment": os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedmoo"),
        "run_name": name, "tags": tags, "resumed": resumed,
        "params": {k: str(v)[:500] for k, v in flatten(cfg).items()}},
        uri, run_dir, confirm=bool(os.environ.get("MLFLOW_TRACKING_URI")))


def _wandb(run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str],
           resumed: bool = False) -> ChildTracker:   # (a resumed run is a new W&B run)
    """The W&B run (fedmoo.run.wandb_writer); a sweep's runs are one group (``sweep_name``)."""
    _need("wandb")
    where = Path(os.environ.get("WANDB_DIR") or run_dir)
    (where / "wandb").mkdir(parents=True, exist_ok=True)
    project = os.environ.get("WANDB_PROJECT", "fedmoo")
    return ChildTracker("wandb", {
        "project": project, "name": name, "group": sweep_name(tags.get("fedmoo.sweep")),
        "dir": str(where), "config": cfg},
        f"W&B project {project} (files in {where / 'wandb'})", run_dir,
        confirm=os.environ.get("WANDB_MODE") not in ("offline", "disabled"))


def sweep_name(sweep: str | None) -> str | None:
    """A sweep's W&B group: its directory's name (at most 128 characters), with its date
    folder when the name is Hydra's time of day (``2026-11-28/08-37-37``)."""
    if not sweep:
        return None
    path = Path(sweep)
    name = f"{path.parent.name}/{path.name}" if re.fullmatch(r"[\d-]+", path.name) else path.name
    return name[-128:]


class Trackers(NullLogger):
    """The run's trackers, by name. One that fails once it started is one warning and is
    dropped; a UserError (a tracker that could not start) stops the run."""

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
          overrides: list[str] | None = None, resumed: bool = False) -> NullLogger:
    """The trackers selected by the ``logger`` config key. ``overrides``: the job's command-line
    overrides; they name the tracked run (``algo=fedfv seed=1``; the run directory's name
    without any). ``resumed``: the run goes on from a checkpoint."""
    members: dict[str, NullLogger] = {}
    name, tags = run_label(Path(run_dir), overrides)
    try:
        for n in dict.fromkeys(n for n in selected(names) if n != "none"):
            members[n] = KINDS[n](Path(run_dir), cfg or {}, name, tags, resumed)
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
