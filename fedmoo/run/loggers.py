"""Live experiment tracking next to the CSV files (rounds.csv stays the source of truth).

``logger=tensorboard`` writes every numeric column of every rounds.csv row as a TensorBoard
scalar (tag = the column name, e.g. ``test/acc_mean``; step = the round) to
``<run dir>/tensorboard``, flushed row by row so ``tensorboard --logdir outputs`` shows runs
while they train. ``logger=none`` (default) writes nothing extra.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fedmoo.errors import UserError

CHOICES = ("none", "tensorboard")


class NullLogger:
    def log(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger:
    def __init__(self, log_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError("logger=tensorboard needs the tensorboard package; "
                            "pip install \"fedmoo[tensorboard]\" or set logger=none") from None
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        for key, value in row.items():
            if key == "round" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self.writer.add_scalar(key, float(value), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def build(name: str | None, run_dir: Path) -> NullLogger | TensorBoardLogger:
    """The tracker selected by the ``logger`` config key."""
    name = "none" if name is None else str(name)
    if name == "none":
        return NullLogger()
    if name == "tensorboard":
        return TensorBoardLogger(Path(run_dir) / "tensorboard")
    raise UserError(f"logger={name!r} is not valid; choose one of: {', '.join(CHOICES)}")
