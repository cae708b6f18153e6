"""A run's (or a lockstep group's) progress over its rounds, on stderr: a tqdm bar on a
terminal or notebook; else plain lines through fedmoo's logger (``<what>: round 40 of 100 (40%),
6 s elapsed, about 9 s left; acc 61.02 std 8.10``) after the first round, every
``FEDMOO_PROGRESS_EVERY`` seconds (30) and after the last; nothing with ``progress=false`` or
``fedmoo -q``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any

from fedmoo import logs
from fedmoo.errors import UserError

log = logging.getLogger(__name__)
EVERY_S = 30.0
ENV = "FEDMOO_PROGRESS_EVERY"


def interval() -> float:
    """Seconds between plain progress lines: ``FEDMOO_PROGRESS_EVERY``, else 30."""
    text = os.environ.get(ENV) or str(EVERY_S)
    try:
        every = float(text)
    except ValueError:
        every = 0.0
    if not every > 0:
        raise UserError(f"{ENV}={text!r} must be the seconds between progress lines when stderr "
                        "is not a terminal (a positive number)")
    return every


def duration(seconds: float) -> str:
    """``42 s``, ``3m05s``, ``2h07m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def task_losses(row: dict[str, Any]) -> list[str]:
    """``task0 0.1234``, ...: a multi-task row's training loss per task, in task order."""
    keys = sorted((k for k in row if k.startswith("train/task") and k.endswith("_loss")),
                  key=lambda k: int(k[len("train/task"):-len("_loss")]))
    return [f"{k[len('train/'):-len('_loss')]} {row[k]:.4g}" for k in keys]


def row_note(row: dict[str, Any]) -> str:
    """What a bar shows of an evaluated round: the tasks' training losses on multi-task data,
    else the test accuracy's mean and spread."""
    if tasks := task_losses(row):
        return "loss " + " ".join(tasks)
    if "test/acc_mean" in row:
        return f"acc {row['test/acc_mean']:.2f} std {row.get('test/acc_std', float('nan')):.2f}"
    return ""


class Lines(contextlib.AbstractContextManager):
    """Plain progress lines (the tqdm calls a run makes: update, set_postfix_str, close)."""

    def __init__(self, total: int, initial: int, desc: str, every: float, clock=time.monotonic):
        self.total, self.n, self.initial, self.desc = total, initial, initial, desc
        self.every, self.clock = every, clock
        self.t0 = self.last = clock()
        self.note = ""
        self.said = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if self.said and now - self.last < self.every and self.n < self.total:
            return      # a line after the first round, every ``every`` seconds and the last
        self.said, self.last = True, now
        done, elapsed = self.n - self.initial, now - self.t0
        left = (f", about {duration(elapsed / done * (self.total - self.n))} left"
                if 0 < done and self.n < self.total else "")
        log.info("%s: round %d of %d (%d%%), %s elapsed%s%s", self.desc, self.n, self.total,
                 100 * self.n // max(self.total, 1), duration(elapsed), left,
                 f"; {self.note}" if self.note else "")

    def set_postfix_str(self, text: str) -> None:
        self.note = text

    def close(self, *exc) -> None:
        pass

    __exit__ = close


def open_bar(total: int, initial: int, desc: str, enabled: bool):
    """The bar, the lines or nothing (see the module docstring); a context manager."""
    shown = bool(enabled) and logs.env_level() <= logging.INFO
    terminal = (sys.stderr is not None and sys.stderr.isatty()    # None: pythonw, a service
                or "ipykernel" in sys.modules)                       # a notebook: its widget
    if shown and not terminal:
        return Lines(total, initial, desc, interval())
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="round", file=sys.stderr,
                disable=not shown, dynamic_ncols=True)
