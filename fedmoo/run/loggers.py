"""Live experiment tracking next to the CSV files (rounds.csv stays the source of truth).

``logger`` is one name or a list (``logger=[tensorboard,mlflow]``):

- ``none`` (default): nothing extra.
- ``tensorboard``: every numeric column of every rounds.csv row as a scalar (tag = the column,
  e.g. ``test/acc_mean``; step = the round) in ``<run dir>/tensorboard``, flushed row by row;
  at the end the config as hparams with the final metrics (``final/<name>``), for the HParams
  view.
- ``mlflow``: an MLflow run in experiment ``fedmoo`` (or ``MLFLOW_EXPERIMENT_NAME``) with the
  config as parameters (dotted keys), every row as metrics (one ``log_batch`` per row; ``/`` in
  names kept, step = the round), the final metrics (``final/<name>``) and summary.json as an
  artifact. A child process writes it (fedmoo.run.mlflow_writer). Tracking URI:
  ``MLFLOW_TRACKING_URI``, else a local SQLite store ``<run dir>/mlflow.db`` (``mlflow ui
  --backend-store-uri sqlite:///<run dir>/mlflow.db``); a SQLite store may be shared by jobs
  running at once, and its artifacts go beside it (``mlartifacts/<experiment>/<run id>``).
  Needs ``pip install -e ".[trackers]"``.
- ``wandb``: a Weights & Biases run in project ``fedmoo`` (or ``WANDB_PROJECT``) with the config,
  every row (step = the round) and the final metrics as its summary; files under
  ``<run dir>/wandb``; W&B's own lines are silenced. ``WANDB_MODE=offline`` keeps it on disk
  (``wandb sync`` uploads later). Needs ``pip install -e ".[trackers]"``.

A tracked run is named after its overrides (``algo=fedfv seed=1``; the run directory's name
when there are none) and tagged with its run directory and, in a sweep, the sweep's directory
(MLflow tags ``fedmoo.run_dir``, ``fedmoo.overrides``, ``fedmoo.sweep``; the W&B group).
Non-finite values are skipped (trackers reject them; rounds.csv keeps them).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError
from fedmoo.report.jobs import flatten
from fedmoo.schema import LOGGERS

CHOICES = LOGGERS   # declared with the `logger` knob (fedmoo.schema)
SWEEP_ENV = "FEDMOO_SWEEP_DIR"   # set by the sweep report callback while a sweep runs,
SWEPT_ENV = "FEDMOO_SWEPT_KEYS"  # with the keys the sweep varies (``seed,algo``)
log = logging.getLogger(__name__)


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k != "round" and not isinstance(v, bool)
            and isinstance(v, (int, float)) and math.isfinite(v)}


def _need(module: str, name: str, load: bool = True):
    """``module`` imported (or only found, ``load=False``); a UserError naming the extra if
    it is not installed."""
    try:
        if not load:
            if importlib.util.find_spec(module) is None:
                raise ImportError(module)
            return None
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"logger={name} needs the {module} package; pip install -e "
                        f"\".[{'tensorboard' if name == 'tensorboard' else 'trackers'}]\" "
                        "or drop it from logger") from None


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
    def __init__(self, run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str]):
        tb = _need("torch.utils.tensorboard", "tensorboard")
        self.writer = tb.SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        self.cfg = cfg

    def log(self, row: dict[str, Any]) -> None:
        for key, value in _numbers(row).items():
            self.writer.add_scalar(key, value, global_step=int(row["round"]))
        self.writer.flush()

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        """The config as hparams with the final metrics (``final/<name>``), in the run's own
        event file: TensorBoard's HParams view then lists a sweep's runs side by side."""
        from torch.utils.tensorboard.summary import hparams

        params = {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
                  for k, v in flatten(self.cfg).items()}
        metrics = {f"final/{k}": v for k, v in _numbers(final).items()}
        writer = self.writer._get_file_writer()
        for summary in hparams(params, metrics):
            writer.add_summary(summary)
        step = int(final.get("round", 0) or 0)
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MLflowLogger(NullLogger):
    """The MLflow run, written by a child process (fedmoo.run.mlflow_writer) so that importing
    MLflow, creating the store and committing every row run beside the rounds."""

    def __init__(self, run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str]):
        _need("mlflow", "mlflow", load=False)
        self.uri = (os.environ.get("MLFLOW_TRACKING_URI")
                    or f"sqlite:///{(Path(run_dir) / 'mlflow.db').resolve()}")
        self.proc = subprocess.Popen([sys.executable, "-m", "fedmoo.run.mlflow_writer"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.error: str | None = None             # the writer's error line
        self.answered = threading.Event()         # its first line came: ready or error
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.done = False
        self._send({"uri": self.uri, "experiment": os.environ.get("MLFLOW_EXPERIMENT_NAME",
                                                                  "fedmoo"),
                    "run_name": name, "tags": tags,
                    "params": {k: str(v)[:500] for k, v in flatten(cfg).items()}})

    def _read(self) -> None:
        for line in self.proc.stdout:
            word, _, rest = line.rstrip("\n").partition(" ")
            if word == "error":
                self.error = rest
            if word in ("ready", "error"):
                self.answered.set()
        self.answered.set()                       # the writer ended

    def _send(self, msg: dict[str, Any]) -> None:
        if self.error:
            raise UserError(self.error)
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):     # the writer ended: its last line says why
            self.proc.wait()
            self.reader.join()
            raise UserError(self.error or "logger=mlflow: the MLflow writer stopped "
                            f"(exit status {self.proc.returncode})") from None

    def log(self, row: dict[str, Any]) -> None:
        self._send({"step": int(row["round"]), "metrics": _numbers(row)})

    def check(self) -> None:
        self.answered.wait()
        if self.error or self.proc.poll() not in (None, 0):
            self.proc.wait()
            self.reader.join()
            raise UserError(self.error or "logger=mlflow: the MLflow writer stopped "
                            f"(exit status {self.proc.returncode})")

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        summary = Path(run_dir) / "summary.json"
        try:
            self._send({"final": _numbers(final), "artifact": str(summary)})
        except UserError:
            pass                                  # said below
        self.done = True
        self._end()
        if self.error:                            # the run's own result is complete: a warning
            log.warning("%s", self.error)

    def _end(self) -> None:
        """End of input: the writer finishes what it was sent and ends (KILLED unless final)."""
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self.proc.wait()
        self.reader.join()

    def close(self) -> None:
        """Stopped early (interrupted, diverged, failed): end of input, and the writer ends the
        MLflow run as KILLED by itself (without keeping a stopping run waiting on it)."""
        if not self.done:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass


class WandbLogger(NullLogger):
    def __init__(self, run_dir: Path, cfg: dict[str, Any], name: str, tags: dict[str, str]):
        wandb = _need("wandb", "wandb")
        folder = Path(run_dir) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        # silent: W&B's own lines (the run's summary block) stay out of fedmoo's output
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "fedmoo"), name=name,
                              group=(tags.get("fedmoo.sweep") or "")[-128:] or None,
                              dir=str(Path(run_dir)), config=cfg, reinit="create_new",
                              settings=wandb.Settings(silent=True))
        self.done = False

    def log(self, row: dict[str, Any]) -> None:
        self.run.log(_numbers(row), step=int(row["round"]))

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        self.run.summary.update(_numbers(final))
        self.run.finish()
        self.done = True

    def close(self) -> None:
        if not self.done:
            self.run.finish(exit_code=1)


class Trackers(NullLogger):
    """Several trackers at once."""

    def __init__(self, members: list[NullLogger]):
        self.members = members

    def log(self, row: dict[str, Any]) -> None:
        for m in self.members:
            m.log(row)

    def check(self) -> None:
        for m in self.members:
            m.check()

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        for m in self.members:
            m.finish(final, run_dir)

    def close(self) -> None:
        for m in self.members:
            m.close()


KINDS = {"tensorboard": TensorBoardLogger, "mlflow": MLflowLogger, "wandb": WandbLogger}


def build(names: str | list[str] | None, run_dir: Path, cfg: dict[str, Any] | None = None,
          overrides: list[str] | None = None) -> NullLogger:
    """The trackers selected by the ``logger`` config key. ``overrides``: the job's command-line
    overrides; they name the tracked run (``algo=fedfv seed=1``; the run directory's name
    without any)."""
    names = ["none"] if names is None else [names] if isinstance(names, str) else list(names)
    for n in names:
        if n not in CHOICES:
            raise UserError(f"logger={n!r} is not valid; choose one or a list of: "
                            f"{', '.join(CHOICES)}")
    members: list[NullLogger] = []
    name, tags = run_label(Path(run_dir), overrides)
    try:
        for n in dict.fromkeys(n for n in names if n != "none"):
            members.append(KINDS[n](Path(run_dir), cfg or {}, name, tags))
    except BaseException:
        Trackers(members).close()
        raise
    return members[0] if len(members) == 1 else Trackers(members)


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
