"""The Hydra app behind ``fedmoo run``: ``task`` runs one job (started by fedmoo.cli.hydra_run
for a run or a sweep, by ``main``, the same under ``@hydra.main``, for ``--cfg job``, ``--info``,
...). A single run that fails ends the process with its exit status (fedmoo.cli.status); in a
sweep a failing job records its failure in its summary.json and the sweep goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback as tb
from dataclasses import dataclass
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedmoo.cli import setups
from fedmoo.run.gpu_lease import lease_device, register_resolvers
from fedmoo.run.progress import task_losses

register_resolvers()  # ${fedmoo.gpus:} in hydra/launcher/local_gpus.yaml
log = logging.getLogger(__name__)


def _report(result) -> None:
    f = result.final
    rounds = f.get("round", 0)
    if result.skipped:
        print(f"already completed: {rounds} rounds (resume=false runs it again)")
    else:
        since = f" (resumed after round {result.resumed_from})" if result.resumed_from else ""
        print(f"done: {rounds} rounds in {result.wall_time_s:.1f} s{since}")
    if tasks := task_losses(f):   # multi-task data: per-task training loss (FMOL)
        print("train loss per task: " + "  ".join(tasks))
    elif "test/acc_mean" in f:
        print(f"test accuracy (%): mean {f['test/acc_mean']:.2f}  std {f['test/acc_std']:.2f}  "
              f"worst10% {f['test/acc_worst10']:.2f}  best10% {f['test/acc_best10']:.2f}")
    print(f"results: {result.run_dir}")


@dataclass
class Job:
    """A job of ``fedmoo run``, prepared under Hydra: its resolved config and directory."""

    cfg: dict
    run_dir: Path
    record: dict[str, str]
    multirun: bool
    traceback: bool
    overrides: list[str] | None = None   # the job's own, for the sweep's report
    sweep_dir: Path | None = None
    num: int = 0                         # the job's number in its sweep


def prepare(cfg: DictConfig) -> tuple[Job, Exception | None]:
    """The job Hydra is running (HydraConfig set), and the error that stops it before it runs
    (an invalid configuration), if any."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from fedmoo.errors import UserError
    from fedmoo.run import loggers, sweeps
    from fedmoo.run.callbacks import as_typed

    hc = HydraConfig.get()
    job = Job(cfg={}, run_dir=Path(hc.runtime.output_dir), record={},
              multirun=hc.mode == RunMode.MULTIRUN, traceback=bool(cfg.traceback),
              overrides=as_typed(hc.overrides.task))
    # in a sweep: the job's sweep directory, and what its trackers are told of the sweep
    # (fedmoo.run.loggers.run_label)
    os.environ.pop(loggers.SWEEP_ENV, None)
    os.environ.pop(loggers.SWEPT_ENV, None)
    if job.multirun:
        job.sweep_dir = Path(str(hc.sweep.dir)).resolve()
        job.num = int(hc.job.num)
        os.environ[loggers.SWEEP_ENV] = str(job.sweep_dir)
        note = sweeps.sweep_info(job.sweep_dir)
        if note is not None:
            os.environ[loggers.SWEPT_ENV] = ",".join(note.get("swept") or [])
    try:
        job.cfg = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        return job, UserError(f"invalid configuration: {str(e).splitlines()[0]}")
    job.record = {"config.yaml": OmegaConf.to_yaml(cfg),
                  "overrides.yaml": OmegaConf.to_yaml(hc.overrides.task)}
    setups.announce(hc.runtime.choices, job.sweep_dir)   # the paper setup it applies, if any
    return job, None


def finish(job: Job, outcome) -> float | None:
    """What a job's outcome (its RunResult, or the exception that ended it) means for the user:
    the report, the failure records and the exit status (see the module docstring). Returns
    the sweep's value of a job that goes on."""
    from fedmoo.cli.status import exit_status
    from fedmoo.errors import DivergenceError, RunInterrupted, UserError
    from fedmoo.run.callbacks import note_job_failure
    from fedmoo.run.rundir import RunDirBusy, record_failure, restore_record  # imports torch

    run_dir = job.run_dir
    if isinstance(outcome, RunInterrupted):
        # Stop the whole sweep too: re-running the command resumes every job.
        log.warning("%s", outcome)
        sys.exit(exit_status(outcome))
    if isinstance(outcome, (UserError, DivergenceError)):
        if job.traceback:
            raise outcome
        log.error("%s", outcome)
        if isinstance(outcome, UserError):   # (a diverged run has written its summary)
            restore_record(run_dir)   # Hydra's files of a refused run must not relabel a result
            if not isinstance(outcome, RunDirBusy):
                record_failure(run_dir, str(outcome), "user")
            if job.multirun:
                note_job_failure(run_dir, str(outcome), job.overrides)
        if job.multirun:
            return None
        sys.exit(exit_status(outcome))
    if isinstance(outcome, BaseException):  # a bug: record it, keep a sweep going, show it
        what = f"{type(outcome).__name__}: {outcome}"
        record_failure(run_dir, what, "internal", "".join(tb.format_exception(outcome)))
        if job.multirun:
            note_job_failure(run_dir, what, job.overrides)
        if not job.multirun or job.traceback:
            raise outcome
        log.error("job failed with %s (traceback in %s)", what, run_dir / "summary.json")
        return None
    with contextlib.suppress(OSError):    # a reader that left: the job is done all the same
        _report(outcome)                   # (launchers' worker processes; fedmoo.cli.main.Output)
    return outcome.final.get("test/acc_mean")


def sweep_started(sweep_dir: Path, jobs: int, swept: list[str]) -> None:
    """fedmoo's sweeper: a sweep of ``jobs`` jobs over the keys ``swept`` starts
    (fedmoo.run.sweeps)."""
    from fedmoo.run import sweeps

    try:
        sweeps.start(sweep_dir, jobs, swept)
    except OSError as e:   # an unusable sweep directory fails its jobs, with their own message
        log.debug("no sweep progress: %s", e)


def task(cfg: DictConfig) -> float | None:
    """Hydra's task function of ``fedmoo run``: one job, its report and its sweep's value."""
    from fedmoo.run import loggers, sweeps

    job, outcome = prepare(cfg)
    if job.sweep_dir is not None:
        sweeps.job_started(job.sweep_dir, job.num, loggers.run_label(job.run_dir, job.overrides)[0])
    if outcome is None:
        try:
            loggers.prestart(job.cfg["logger"])   # before torch: MLflow's import overlaps it
            from fedmoo.run import loop

            with lease_device(job.cfg["device"]) as device:
                outcome = loop.run({**job.cfg, "device": device}, job.run_dir, job.record)
        except Exception as e:  # noqa: BLE001 - finish() reports every kind of failure
            outcome = e
    value = finish(job, outcome)
    if job.sweep_dir is not None:
        sweeps.job_done(job.sweep_dir)
    return value


# The same app under ``@hydra.main``, for Hydra's other flags (--cfg job, --info, --hydra-help)
main = hydra.main(config_path="pkg://fedmoo.conf", config_name="config", version_base="1.3")(task)


def collect(cfg: DictConfig) -> Job | None:
    """``hydra/launcher=lockstep``, first pass: the prepared job (None when it cannot run;
    reported as ``task`` reports it)."""
    job, error = prepare(cfg)
    if error is not None:
        finish(job, error)
        return None
    return job


def run_together(jobs: list[Job | None], max_rows: int) -> list[float | None]:
    """``hydra/launcher=lockstep``, second pass: run the collected jobs together
    (fedmoo.run.group; each job's numbers as alone), then report each as
    ``task`` would; the sweep's values in job order."""
    from fedmoo import logs
    from fedmoo.errors import RunInterrupted
    from fedmoo.run import group, sweeps

    logs.setup()   # the shared training's messages: stderr, not the last prepared job's log
    todo = [j for j in jobs if j is not None]
    try:
        with lease_device("auto") as leased:
            outcomes = group.run_jobs(
                [group.Job({**j.cfg, "device": leased if j.cfg["device"] == "auto"
                            else j.cfg["device"]}, j.run_dir, j.record) for j in todo],
                max_rows, on_plan=lambda plan: _say_plan(plan, todo, max_rows))
    except RunInterrupted as e:
        finish(todo[0], e)
    outcome = iter(outcomes)      # one per collected job, in order
    values = []
    for j in jobs:
        if j is None:
            values.append(None)
            continue
        with _job_log(j):
            values.append(finish(j, next(outcome)))
    if todo and todo[0].sweep_dir is not None:     # every job, run or refused, ends here
        sweeps.job_done(todo[0].sweep_dir, count=len(jobs))
    return values


def _say_plan(plan, jobs: list[Job], max_rows: int) -> None:
    sizes = sorted((len(g) for g in plan.groups if len(g) > 1), reverse=True)
    other = plan.total - plan.grouped - plan.single
    log.info("lockstep: %s of %s jobs train together in %s group(s) of %s runs (max_rows=%s); "
             "%s alone%s", plan.grouped, plan.total, len(sizes), ", ".join(map(str, sizes)) or "-",
             max_rows, plan.single,
             f"; {other} done already or stopped before training" if other else "")
    for i, why in plan.alone:
        log.info("  alone: %s (%s)", jobs[i].run_dir.name, why)


@contextlib.contextmanager
def _job_log(job: Job):
    """Within the block, fedmoo's messages also go to the job's run log (``fedmoo.log``, as
    Hydra's job logging does for a job it runs itself): used while reporting a job that
    trained in a lockstep group."""
    from fedmoo import logs

    try:
        handler = logs.RunLog(job.run_dir / "fedmoo.log")
    except OSError:        # an unusable directory: its failure is reported on stderr anyway
        yield
        return
    handler.setFormatter(logs.Formatter())
    logger = logging.getLogger("fedmoo")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
