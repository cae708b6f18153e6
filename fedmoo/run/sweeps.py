"""A sweep's overall progress: ``job k of N`` lines with an ETA, whatever the launcher.

fedmoo's sweeper notes the sweep in ``<sweep dir>/.fedmoo/sweep.json`` before the first job
starts; a job, in whichever process or node, announces itself and at its end counts itself in
``.fedmoo/jobs-done`` under a file lock.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from filelock import FileLock

from fedmoo.report.results import SWEEP_NOTE, atomic_write_text, sweep_info
from fedmoo.run.progress import duration

log = logging.getLogger(__name__)
DONE = Path(".fedmoo") / "jobs-done"


def start(sweep_dir: Path, jobs: int, swept: list[str]) -> None:
    """A sweep of ``jobs`` jobs starts now in ``sweep_dir`` (its count of finished jobs is reset)."""
    (Path(sweep_dir) / SWEEP_NOTE).parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(Path(sweep_dir) / DONE) + ".lock", thread_local=False):
        (Path(sweep_dir) / DONE).write_text("0")
        atomic_write_text(Path(sweep_dir) / SWEEP_NOTE,
                          json.dumps({"jobs": jobs, "start": time.time(), "swept": swept}))


def job_started(sweep_dir: Path, num: int, label: str) -> None:
    note = sweep_info(sweep_dir)
    if note is not None:
        log.info("job %d of %d: %s", num + 1, note["jobs"], label)


def job_done(sweep_dir: Path, now: float | None = None, count: int = 1) -> int | None:
    """Count ``count`` finished jobs (completed, skipped or failed) and say where the sweep
    stands; returns the count of finished jobs. Jobs that ended together (a lockstep launch)
    are counted at once: one line each would promise time for jobs already done."""
    note = sweep_info(sweep_dir)
    if note is None:
        return None
    path = Path(sweep_dir) / DONE
    try:
        with FileLock(str(path) + ".lock", thread_local=False):
            try:
                done = int(path.read_text() or 0) + count
            except (OSError, ValueError):
                done = count
            path.write_text(str(done))
    except OSError:
        return None
    total, elapsed = note["jobs"], (time.time() if now is None else now) - note["start"]
    left = (f", about {duration(elapsed / done * (total - done))} left" if done < total else "")
    log.info("sweep: %d of %d jobs done, %s elapsed%s", done, total, duration(elapsed), left)
    return done
