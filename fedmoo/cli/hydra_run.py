"""``fedmoo run``'s Hydra app started through Hydra's public API, its configuration composed once.

``@hydra.main`` composes the whole configuration an extra time before a run or sweep, only to
read ``hydra.mode`` (0.15-0.25 s of every ``fedmoo run``, docs/PERFORMANCE.md). Here the command
line decides the mode (``-m``, or ``hydra.mode=RUN|MULTIRUN``) and hands it to Hydra as the
override ``hydra.mode=...``, which is what Hydra itself adds; then the run or the sweep starts as
Hydra starts them: one composition (``ConfigLoader.load_configuration``), Hydra's logging, the
``hydra.callbacks``, ``run_job`` for a run, the configured sweeper for a sweep. Every name used
is Hydra's public API (``hydra.initialize_config_module``, ``hydra.core``, ``hydra.types``).

A command line with Hydra's other flags (``--cfg``, ``--info``, ``--hydra-help``,
``--config-dir``, ...) goes to ``@hydra.main`` (``fedmoo.cli.app.main``) unchanged: ``plan``
returns None for it. A ``hydra.mode`` set in a config file, not on the command line, is not
read: use ``-m``. A sweep with ``--config-dir``/``--config-name``/``--config-path`` is refused
(``@hydra.main`` would run it without telling how many jobs failed): ``hydra.searchpath`` adds a
config folder instead.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Callable

CONFIG_MODULE, CONFIG_NAME, JOB_NAME = "fedmoo.conf", "config", "app"
MULTIRUN_FLAGS, RUN_FLAGS = ("-m", "--multirun"), ("-r", "--run")
CONFIG_FLAGS = ("-cd", "--config-dir", "-cn", "--config-name", "-cp", "--config-path")


def plan(args: list[str]) -> tuple[bool, list[str]] | None:
    """``(multirun, overrides)`` for Hydra arguments this module runs (overrides, ``-m``,
    ``--run``), the overrides ending with the ``hydra.mode`` they run in; None for any other
    flag or an unusual ``hydra.mode`` override (``@hydra.main`` takes those)."""
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    multirun = any(f in MULTIRUN_FLAGS for f in flags)
    config = [f for f in flags if f.partition("=")[0] in CONFIG_FLAGS]
    if multirun and config:
        from fedmoo.errors import UserError

        raise UserError(f"fedmoo run -m does not take {config[0].partition('=')[0]} (the sweep's "
                        "failures could not be counted); add your config folder with "
                        "hydra.searchpath=[file:///abs/dir] and name its configs with group=option")
    if any(f not in MULTIRUN_FLAGS + RUN_FLAGS for f in flags):
        return None
    if multirun and any(f in RUN_FLAGS for f in flags):
        return None                         # Hydra's own message: only one of --run, --multirun
    modes = []
    for a in overrides:
        key, _, value = a.partition("=")
        if key.lstrip("+~") == "hydra.mode":
            if key != "hydra.mode" or value not in ("RUN", "MULTIRUN"):
                return None
            modes.append(value)
    multirun = multirun or (modes[-1:] == ["MULTIRUN"])
    mode = "MULTIRUN" if multirun else "RUN"
    if modes[-1:] != [mode]:
        overrides.append(f"hydra.mode={mode}")   # -m wins over hydra.mode=RUN, as in Hydra
    return multirun, overrides


class Callbacks:
    """The ``hydra.callbacks`` of a configuration, each told of the run's events in Hydra's
    order (the ends in reverse); a callback that raises becomes a warning, as in Hydra.
    Launchers in other processes (joblib, submitit) get it pickled with their HydraContext."""

    def __init__(self, config: Any) -> None:
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        nodes = OmegaConf.select(config, "hydra.callbacks") or {}
        self.callbacks = [instantiate(node) for node in nodes.values()]

    def _notify(self, event: str, reverse: bool = False, **kwargs: Any) -> None:
        for c in reversed(self.callbacks) if reverse else self.callbacks:
            try:
                getattr(c, event)(**kwargs)
            except Exception as e:  # noqa: BLE001 - Hydra's rule: a callback never stops a run
                warnings.warn(f"Callback {type(c).__name__}.{event} raised {type(e).__name__}: "
                              f"{e}", stacklevel=2)

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        self._notify("on_run_start", config=config, **kwargs)

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        self._notify("on_run_end", reverse=True, config=config, **kwargs)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self._notify("on_multirun_start", config=config, **kwargs)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self._notify("on_multirun_end", reverse=True, config=config, **kwargs)

    def on_job_start(self, config: Any, *, task_function: Callable, **kwargs: Any) -> None:
        self._notify("on_job_start", config=config, task_function=task_function, **kwargs)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        self._notify("on_job_end", reverse=True, config=config, job_return=job_return, **kwargs)


def run(task_function: Callable, multirun: bool, overrides: list[str]) -> int:
    """Run ``task_function`` as Hydra's run or sweep of ``overrides`` (from ``plan``); returns
    the number of the sweep's jobs that failed or left no result (read from the sweep
    directory, so jobs of any launcher count; 0 for a run). Errors propagate as Hydra's do
    under HYDRA_FULL_ERROR=1."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext, RunMode

    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3",
                                  job_name=JOB_NAME):
        loader = GlobalHydra.instance().config_loader()
        cfg = loader.load_configuration(config_name=CONFIG_NAME, overrides=list(overrides),
                                        run_mode=mode)
        configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        callbacks = Callbacks(cfg)
        context = HydraContext(config_loader=loader, callbacks=callbacks)  # type: ignore[arg-type]
        if multirun:
            return _sweep(context, task_function, cfg)
        callbacks.on_run_start(config=cfg, config_name=CONFIG_NAME)
        done = run_job(hydra_context=context, task_function=task_function, config=cfg,
                       job_dir_key="hydra.run.dir", job_subdir_key=None)
        callbacks.on_run_end(config=cfg, config_name=CONFIG_NAME, job_return=done)
        done.return_value      # raises the job's error, as Hydra's run does
        return 0


def _sweep(context: Any, task_function: Callable, cfg: Any) -> int:
    from hydra.core.plugins import Plugins
    from omegaconf import OmegaConf

    from fedmoo.run.callbacks import SweepReport, failed_jobs

    started = time.time()
    context.callbacks.on_multirun_start(config=cfg, config_name=CONFIG_NAME)
    sweeper = Plugins.instance().instantiate_sweeper(config=cfg, hydra_context=context,
                                                     task_function=task_function)
    sweeper.sweep(arguments=OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
    context.callbacks.on_multirun_end(config=cfg, config_name=CONFIG_NAME)
    # the sweep report read every job's files already; without it (hydra.callbacks changed),
    # read them here
    report = next((c for c in context.callbacks.callbacks if isinstance(c, SweepReport)), None)
    if report is not None and report.failed is not None:
        return len(report.failed)
    return len(failed_jobs(Path(str(cfg.hydra.sweep.dir)), started))
