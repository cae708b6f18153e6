"""Hydra callback that ends a sweep with the list of jobs that did not complete.

Registered in conf/config.yaml under ``hydra.callbacks``. It reads each job's summary.json, so
it works with any launcher (jobs in other processes or on other nodes) as long as the sweep
directory is shared. ``fedmoo run -m`` exits with status 1 when a job failed or left no result;
diverged jobs are listed too but are results (``fedmoo table`` shows them), so they alone do
not change the exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from fedmoo.report.results import read_summary

# Job directories of the last sweep of this process that failed or left no result; the CLI
# turns a non-empty list into exit status 1.
failed_jobs: list[Path] = []


def job_outcomes(sweep_dir: Path) -> list[tuple[Path, str, str]]:
    """(job directory, status, message) of every job under ``sweep_dir`` (a job directory is
    one that Hydra gave a ``.hydra`` folder); a job without summary.json has status ``missing``."""
    out = []
    for hydra_dir in sorted(Path(sweep_dir).rglob(".hydra")):
        job = hydra_dir.parent
        summary = read_summary(job / "summary.json")
        if summary is None:
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
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        outcomes = job_outcomes(sweep_dir)
        counts: dict[str, int] = {}
        for _, status, _ in outcomes:
            counts[status] = counts.get(status, 0) + 1
        bad = [o for o in outcomes if o[1] != "completed"]
        failed_jobs[:] = [job for job, status, _ in bad if status != "diverged"]
        if not bad:
            return
        parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        print(f"fedmoo: sweep {sweep_dir}: {len(outcomes)} jobs: {parts}", file=sys.stderr)
        for job, status, message in bad:
            label = job.relative_to(sweep_dir).as_posix()
            print(f"fedmoo:   {status} job {label} ({_overrides(job)}): {message}", file=sys.stderr)
        if failed_jobs:
            print("fedmoo: fix the cause and run the same command again (with the same "
                  "hydra.sweep.dir): completed jobs are skipped", file=sys.stderr)
