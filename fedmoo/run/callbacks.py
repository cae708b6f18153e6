"""Hydra callback that ends a sweep with the list of jobs that did not complete.

Registered in conf/config.yaml under ``hydra.callbacks``. It reads each job's summary.json, so
it works with any launcher (jobs in other processes or on other nodes) as long as the sweep
directory is shared. A job that this sweep could not run although its directory holds an older
result (refused: another configuration, or another process holds the directory) leaves
``.fedmoo/sweep-failure.json`` stamped with the sweep's token (environment variable
``FEDMOO_SWEEP_TOKEN``, set when the sweep starts and inherited by its jobs), so it counts as
failed without touching the older result. ``fedmoo run -m`` exits with status 1 when a job failed or left no result;
diverged jobs are listed too but are results (``fedmoo table`` shows them), so they alone do
not change the exit status.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from fedmoo import logs
from fedmoo.report.results import read_summary

# Job directories of the last sweep of this process that failed or left no result; the CLI
# turns a non-empty list into exit status 1.
failed_jobs: list[Path] = []


log = logging.getLogger(__name__)
PLAIN = {"prefix": "fedmoo: "}   # the report's lines are errors without "error: " (fedmoo/logs.py)
TOKEN = "FEDMOO_SWEEP_TOKEN"
NOTE = Path(".fedmoo") / "sweep-failure.json"


def note_job_failure(job: Path, message: str) -> None:
    """Mark ``job`` as failed in the running sweep (best effort: the directory may be unusable)."""
    try:
        (Path(job) / NOTE).parent.mkdir(parents=True, exist_ok=True)
        (Path(job) / NOTE).write_text(json.dumps({"token": os.environ.get(TOKEN, ""),
                                                  "message": message}))
    except OSError:
        pass


def _failure_note(job: Path) -> str | None:
    """The message of this sweep's failure note in ``job``, if it has one."""
    try:
        note = json.loads((job / NOTE).read_text())
    except (OSError, ValueError):
        return None
    token = os.environ.get(TOKEN)
    if not isinstance(note, dict) or not token or note.get("token") != token:
        return None
    return str(note.get("message") or "")


def job_outcomes(sweep_dir: Path) -> list[tuple[Path, str, str]]:
    """(job directory, status, message) of every job under ``sweep_dir`` (a job directory is
    one that Hydra gave a ``.hydra`` folder); a job without summary.json has status ``missing``,
    one this sweep refused has status ``refused``."""
    out = []
    for hydra_dir in sorted(Path(sweep_dir).rglob(".hydra")):
        job = hydra_dir.parent
        summary = read_summary(job / "summary.json")
        refused = _failure_note(job)
        if refused is not None and (summary is None or summary.get("status") != "failed"):
            out.append((job, "refused", refused))
        elif summary is None:
            out.append((job, "missing", "no summary.json: the job was killed or crashed"))
        else:
            out.append((job, str(summary.get("status")), str(summary.get("message") or "")))
    return out


def _overrides(job: Path) -> str:
    try:
        return " ".join(OmegaConf.to_container(OmegaConf.load(job / ".hydra" / "overrides.yaml")))
    except Exception:  # noqa: BLE001 - only a label for the report
        return ""


class SweepReport(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[TOKEN] = uuid.uuid4().hex

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        logs.setup()    # stderr only from here: the last job's run log is not the sweep's
        sweep_dir = Path(str(config.hydra.sweep.dir))
        outcomes = job_outcomes(sweep_dir)
        counts: dict[str, int] = {}
        for _, status, _ in outcomes:
            counts[status] = counts.get(status, 0) + 1
        bad = [o for o in outcomes if o[1] != "completed"]
        failed_jobs[:] = [job for job, status, _ in bad if status != "diverged"]
        if not bad:
            return
        level = logging.ERROR if failed_jobs else logging.WARNING   # fedmoo -q shows errors
        parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        log.log(level, "sweep %s: %d jobs: %s", sweep_dir, len(outcomes), parts, extra=PLAIN)
        for job, status, message in bad:
            label = job.relative_to(sweep_dir).as_posix()
            log.log(logging.WARNING if status == "diverged" else logging.ERROR,
                    "  %s job %s (%s): %s", status, label, _overrides(job), message, extra=PLAIN)
        if failed_jobs:
            log.error("fix the cause and run the same command again (with the same "
                      "hydra.sweep.dir): completed jobs are skipped", extra=PLAIN)
