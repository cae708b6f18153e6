"""Hydra callback that ends a sweep with the list of jobs that did not complete.

It reads each job's summary.json, so it works with any launcher sharing the sweep directory. A
job this sweep refused although its directory holds an older result leaves a note in
``.fedmoo/sweep-failure.json`` stamped with the sweep's token (``FEDMOO_SWEEP_TOKEN``): it
counts as failed without touching the older result. ``fedmoo run -m`` exits with status 1 when
a job failed or left no result (``failed_jobs``); diverged jobs are listed but are results.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from fedmoo import logs
from fedmoo.report.results import atomic_write_text, read_summary

log = logging.getLogger(__name__)
PLAIN = {"prefix": "fedmoo: "}   # the report's lines are errors without "error: " (fedmoo/logs.py)
TOKEN = "FEDMOO_SWEEP_TOKEN"
NOTE = Path(".fedmoo") / "sweep-failure.json"
MULTIRUN = "multirun.yaml"


def as_typed(overrides) -> list[str]:
    """Hydra's list of override strings (``hydra.overrides.task``) as typed: an interpolation in
    one (``data_dir=${oc.env:X}``) stays text; the job's config resolves it (an unset variable
    is its one-line error there, not a traceback here)."""
    return [str(o) for o in OmegaConf.to_container(overrides, resolve=False)]


def note_job_failure(job: Path, message: str, overrides: list[str] | None = None) -> None:
    """Mark ``job`` as failed in the running sweep (best effort), naming its own ``overrides``
    (else the running Hydra job's): the directory's ``.hydra`` record may be another job's."""
    if overrides is None:
        with contextlib.suppress(Exception):   # no Hydra job here (a test, fedmoo.api)
            from hydra.core.hydra_config import HydraConfig

            overrides = as_typed(HydraConfig.get().overrides.task)
    notes = _notes(Path(job))
    notes.append({"token": os.environ.get(TOKEN, ""), "message": message,
                  "overrides": overrides})
    with contextlib.suppress(OSError):
        (Path(job) / NOTE).parent.mkdir(parents=True, exist_ok=True)
        (Path(job) / NOTE).write_text(json.dumps(notes))


def _notes(job: Path) -> list[dict[str, Any]]:
    """This sweep's failure notes in ``job`` (an older single note counts as one)."""
    token = os.environ.get(TOKEN)
    try:
        notes = json.loads((job / NOTE).read_text())
    except (OSError, ValueError, RecursionError):
        return []
    notes = notes if isinstance(notes, list) else [notes]
    return [n for n in notes if isinstance(n, dict) and token and n.get("token") == token]


def job_outcomes(sweep_dir: Path, since: float | None = None) -> list[tuple[Path, str, str, str]]:
    """(job directory, status, message, overrides) of every job under ``sweep_dir`` (with a
    ``.hydra`` folder): ``missing`` without summary.json, ``refused`` for a job this sweep
    refused; such a directory lists its result too when this sweep wrote it (after ``since``)
    or it failed."""
    out = []
    for hydra_dir in sorted(Path(sweep_dir).rglob(".hydra")):
        job = hydra_dir.parent
        summary = read_summary(job / "summary.json")
        refused = [(str(n.get("message") or ""), " ".join(map(str, ov))
                    if isinstance(ov := n.get("overrides"), list) else None) for n in _notes(job)]
        kept = _overrides(job)
        failed = summary is not None and summary.get("status") == "failed"
        for message, overrides in refused:     # a job that failed before it ran says so
            status = "failed" if failed and str(summary.get("message")) == message else "refused"
            out.append((job, status, message, overrides if overrides is not None else kept))
        if refused and failed:
            continue                        # the refusal's own record (record_failure)
        if refused and (summary is None or since is None
                        or (job / "summary.json").stat().st_mtime < since):
            continue                        # an older result, not a job of this sweep
        if summary is None:
            out.append((job, "missing", "no summary.json: the job was killed or crashed", kept))
        else:
            out.append((job, str(summary.get("status")), str(summary.get("message") or ""),
                        kept))
    return out


def _overrides(job: Path) -> str:
    try:
        return " ".join(OmegaConf.to_container(OmegaConf.load(job / ".hydra" / "overrides.yaml")))
    except Exception:  # noqa: BLE001 - only a label for the report
        return ""


def failing(outcomes: list[tuple[Path, str, str, str]]) -> list[Path]:
    """The job directories of ``outcomes`` that failed or left no result (not diverged)."""
    return list(dict.fromkeys(job for job, status, _, _ in outcomes
                              if status not in ("completed", "diverged")))


def failed_jobs(sweep_dir: Path, since: float | None = None) -> list[Path]:
    """The jobs of the sweep in ``sweep_dir`` (started at ``since``) that failed or left no
    result, read from their files (job_outcomes): what makes ``fedmoo run -m`` exit with 1."""
    return failing(job_outcomes(sweep_dir, since))


class SweepReport(Callback):
    """Lists the sweep's failed jobs at its end; keeps the sweep directory's ``multirun.yaml``
    of the results there when every job of a sweep was refused."""

    def __init__(self) -> None:
        self.started = 0.0
        self.previous: str | None = None      # multirun.yaml before this sweep rewrote it
        self.failed: list[Path] | None = None  # what the report found (fedmoo run -m's status)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[TOKEN] = uuid.uuid4().hex
        self.started = time.time()
        try:
            self.previous = (Path(str(config.hydra.sweep.dir)) / MULTIRUN).read_text()
        except (OSError, ValueError):
            self.previous = None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        logs.setup()    # stderr only from here: the last job's run log is not the sweep's
        sweep_dir = Path(str(config.hydra.sweep.dir))
        outcomes = job_outcomes(sweep_dir, self.started)
        restored = False      # the earlier multirun.yaml put back: no job of this sweep ran
        if self.previous is not None and outcomes and all(s == "refused" for _, s, *_ in outcomes):
            with contextlib.suppress(OSError):
                atomic_write_text(sweep_dir / MULTIRUN, self.previous)
                restored = True
        counts = Counter(status for _, status, _, _ in outcomes)
        bad = [o for o in outcomes if o[1] != "completed"]
        failed = self.failed = failing(outcomes)
        if not bad:
            return
        parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        # the count is a result: logged as an error so that fedmoo -q shows it, diverged or not
        log.error("sweep %s: %d jobs: %s", sweep_dir, len(outcomes), parts, extra=PLAIN)
        for job, status, message, overrides in bad:
            label = job.relative_to(sweep_dir).as_posix()
            log.log(logging.WARNING if status == "diverged" else logging.ERROR,
                    "  %s job %s (%s): %s", status, label, overrides, message, extra=PLAIN)
        for job in [j for j, n in Counter(j for j, *_ in outcomes).items() if n > 1]:
            log.error("  several jobs of this sweep used the directory %s: give each job its "
                      "own hydra.sweep.subdir (e.g. ${hydra.job.num}, or one that names every "
                      "swept key)", job.relative_to(sweep_dir).as_posix(), extra=PLAIN)
        if restored:
            log.error("  no job of this sweep ran: %s still describes the sweep whose results "
                      "are there", sweep_dir / MULTIRUN, extra=PLAIN)
        if failed:
            log.error("fix the cause and run the same command again (with the same "
                      "hydra.sweep.dir): completed jobs are skipped", extra=PLAIN)
