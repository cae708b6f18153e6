"""SIGTERM / SIGINT: finish the round, checkpoint, stop (a second signal stops at once)."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)


class StopSignals:
    """On SIGTERM / SIGINT remember the signal so the loop checkpoints and stops at a round
    boundary; a second signal stops at once. Only the main thread can install handlers."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: saving a checkpoint at the end of this round (send it again "
                    "to stop at once)", signal.Signals(signum).name)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
