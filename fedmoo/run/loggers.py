"""Live experiment tracking next to the CSV files (rounds.csv stays the source of truth).

``logger`` is one name or a list (``logger=[tensorboard,mlflow]``):

- ``none`` (default): nothing extra.
- ``tensorboard``: every numeric column of every rounds.csv row as a scalar (tag = the column,
  e.g. ``test/acc_mean``; step = the round) in ``<run dir>/tensorboard``, flushed row by row.
- ``mlflow``: an MLflow run named after the run directory, in experiment ``fedmoo`` (or
  ``MLFLOW_EXPERIMENT_NAME``), with the config as parameters (dotted keys), every row as
  metrics (``/`` in names kept, step = the round), the final metrics and summary.json as an
  artifact. Tracking URI: ``MLFLOW_TRACKING_URI``, else a local SQLite store
  ``<run dir>/mlflow.db`` (``mlflow ui --backend-store-uri sqlite:///<run dir>/mlflow.db``). Needs ``pip install -e ".[trackers]"``.
- ``wandb``: a Weights & Biases run in project ``fedmoo`` (or ``WANDB_PROJECT``) with the config,
  every row (step = the round) and the final metrics as its summary; files under
  ``<run dir>/wandb``. ``WANDB_MODE=offline`` keeps it on disk (``wandb sync`` uploads later).
  Needs ``pip install -e ".[trackers]"``.

Non-finite values are skipped (trackers reject them; rounds.csv keeps them).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError
from fedmoo.report.jobs import flatten

CHOICES = ("none", "tensorboard", "mlflow", "wandb")


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k != "round" and not isinstance(v, bool)
            and isinstance(v, (int, float)) and math.isfinite(v)}


def _need(module: str, name: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"logger={name} needs the {module} package; pip install -e "
                        f"\".[{'tensorboard' if name == 'tensorboard' else 'trackers'}]\" "
                        "or drop it from logger") from None


class NullLogger:
    def log(self, row: dict[str, Any]) -> None:
        pass

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(NullLogger):
    def __init__(self, run_dir: Path, cfg: dict[str, Any]):
        tb = _need("torch.utils.tensorboard", "tensorboard")
        self.writer = tb.SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, row: dict[str, Any]) -> None:
        for key, value in _numbers(row).items():
            self.writer.add_scalar(key, value, global_step=int(row["round"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MLflowLogger(NullLogger):
    def __init__(self, run_dir: Path, cfg: dict[str, Any]):
        self.mlflow = _need("mlflow", "mlflow")
        uri = (os.environ.get("MLFLOW_TRACKING_URI")
               or f"sqlite:///{(Path(run_dir) / 'mlflow.db').resolve()}")
        self.client = self.mlflow.MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedmoo")
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(
            name, artifact_location=(Path(run_dir) / "mlartifacts").resolve().as_uri())
        self.run_id = self.client.create_run(exp_id, run_name=Path(run_dir).name).info.run_id
        for key, value in flatten(cfg).items():
            self.client.log_param(self.run_id, key, str(value)[:500])

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        for key, value in _numbers(row).items():
            self.client.log_metric(self.run_id, key, value, step=step)

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        for key, value in _numbers(final).items():
            self.client.log_metric(self.run_id, f"final/{key}", value)
        summary = Path(run_dir) / "summary.json"
        if summary.exists():
            self.client.log_artifact(self.run_id, str(summary))
        self.client.set_terminated(self.run_id, "FINISHED")
        self.run_id = None

    def close(self) -> None:
        if self.run_id is not None:           # stopped early: interrupted, diverged, failed
            self.client.set_terminated(self.run_id, "KILLED")


class WandbLogger(NullLogger):
    def __init__(self, run_dir: Path, cfg: dict[str, Any]):
        wandb = _need("wandb", "wandb")
        folder = Path(run_dir) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "fedmoo"),
                              name=Path(run_dir).name, dir=str(Path(run_dir)), config=cfg,
                              reinit="create_new")
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

    def finish(self, final: dict[str, Any], run_dir: Path) -> None:
        for m in self.members:
            m.finish(final, run_dir)

    def close(self) -> None:
        for m in self.members:
            m.close()


KINDS = {"tensorboard": TensorBoardLogger, "mlflow": MLflowLogger, "wandb": WandbLogger}


def build(names: str | list[str] | None, run_dir: Path, cfg: dict[str, Any] | None = None
          ) -> NullLogger:
    """The trackers selected by the ``logger`` config key."""
    names = ["none"] if names is None else [names] if isinstance(names, str) else list(names)
    for n in names:
        if n not in CHOICES:
            raise UserError(f"logger={n!r} is not valid; choose one or a list of: "
                            f"{', '.join(CHOICES)}")
    members: list[NullLogger] = []
    try:
        for n in dict.fromkeys(n for n in names if n != "none"):
            members.append(KINDS[n](Path(run_dir), cfg or {}))
    except BaseException:
        Trackers(members).close()
        raise
    return members[0] if len(members) == 1 else Trackers(members)
