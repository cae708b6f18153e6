"""``fedmoo run``'s Hydra app started through Hydra's public API: its configuration composed once
and checked (``fedmoo.cli.trusted.CheckedLoader``) before Hydra's logging, callbacks, ``run_job``
or sweeper use it (``@hydra.main`` composes it twice, unchecked; docs/PERFORMANCE.md). The command
line decides the mode (``-m`` or ``hydra.mode=RUN|MULTIRUN``, not a config file); ``--config-dir``
and an absolute ``--config-path`` become the config search path; Hydra's other flags (``--cfg``,
``--info``, ...) go to ``@hydra.main`` (``fedmoo.cli.app.main``) once ``check`` has composed
their configuration the same way.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple

CONFIG_MODULE, CONFIG_NAME, JOB_NAME = "fedmoo.conf", "config", "app"
MULTIRUN_FLAGS, RUN_FLAGS = ("-m", "--multirun"), ("-r", "--run")
# Hydra options that may be written after overrides (argparse refuses overrides after them).
FLAGS = {"-m", "--multirun", "--run", "--resolve"}
CONFIG_FLAGS = {"-cd": "config_dir", "--config-dir": "config_dir", "-cn": "config_name",
                "--config-name": "config_name", "-cp": "config_path", "--config-path": "config_path"}


class Plan(NamedTuple):
    """What ``fedmoo run`` asks Hydra for: ``multirun`` (None: another flag of Hydra's, for
    ``@hydra.main``), the overrides (ending with the ``hydra.mode`` they run in), the primary
    config's name and folder, and Hydra's other flags."""

    multirun: bool | None
    overrides: list[str]
    config_name: str = CONFIG_NAME
    config_path: str | None = None
    flags: tuple[str, ...] = ()


def plan(args: list[str]) -> Plan:
    """The plan of ``fedmoo run ARGS``: Hydra's options first (``fedmoo run seed=0,1 -m``
    works), group choices quoted (``fedmoo.cli.overrides.group_choice``); ``multirun`` is None
    for a flag this module does not run or an unusual ``hydra.mode`` override (``@hydra.main``
    takes those)."""
    from fedmoo.cli.config import with_plugins
    from fedmoo.cli.overrides import VALUED, group_choice
    from fedmoo.errors import UserError

    given: dict[str, str] = {}
    options, flags, overrides = [], [], []
    rest = iter(args)
    for arg in rest:
        name, eq, value = arg.partition("=")
        if name in CONFIG_FLAGS:
            given[CONFIG_FLAGS[name]] = value if eq else next(rest, "")
        elif arg in FLAGS:
            options.append(arg)
        elif arg in VALUED and (value := next(rest, None)) is not None:   # --cfg job, -p algo
            options += [arg, value]
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            overrides.append(group_choice(arg))
    flags = options + flags
    path = given.get("config_path")
    if "config_dir" in given:
        folder = Path(given["config_dir"]).expanduser().resolve()
        if not folder.is_dir():
            raise UserError(f"--config-dir {given['config_dir']}: no such folder")
        named = given.get("config_name")        # (-cn: not "None.yaml" when it is not given)
        if named and (folder / f"{named}.yaml").is_file() and path is None:
            # the primary config is the folder's: Hydra reads it before hydra.searchpath
            path, folder = str(folder), None
        entry = folder.as_uri() if folder else f"pkg://{CONFIG_MODULE}"
        overrides.insert(0, f"hydra.searchpath=[{entry}]")
    if path is not None and not os.path.isabs(path) and not path.startswith("pkg://"):
        raise UserError(f"--config-path {path}: give an absolute folder (or add a folder of "
                        "configs with --config-dir)")
    base = {"overrides": with_plugins(overrides), "config_name": given.get("config_name")
            or CONFIG_NAME, "config_path": path}
    multirun = any(f in MULTIRUN_FLAGS for f in flags)
    other = tuple(f for f in flags if f not in MULTIRUN_FLAGS + RUN_FLAGS)
    if other or (multirun and any(f in RUN_FLAGS for f in flags)):
        return Plan(None, flags=tuple(flags), **base)   # @hydra.main's flags and messages
    modes = []
    for a in base["overrides"]:
        key, _, value = a.partition("=")
        if key.lstrip("+~") == "hydra.mode":
            if key != "hydra.mode" or value not in ("RUN", "MULTIRUN"):
                return Plan(None, flags=tuple(flags), **base)
            modes.append(value)
    multirun = multirun or (modes[-1:] == ["MULTIRUN"])
    mode = "MULTIRUN" if multirun else "RUN"
    if modes[-1:] != [mode]:
        base["overrides"].append(f"hydra.mode={mode}")   # -m wins over hydra.mode=RUN
    return Plan(multirun, **base)


def argv(p: Plan) -> list[str]:
    """``p`` as ``@hydra.main``'s command line (the config folder already in the overrides)."""
    named = ["--config-name", p.config_name] if p.config_name != CONFIG_NAME else []
    return [*p.flags, *named, *(["--config-path", p.config_path] if p.config_path else []),
            *p.overrides]


@contextlib.contextmanager
def loader(p: Plan):
    """Hydra initialised for ``p`` (fedmoo's config module, or the absolute ``--config-path``)
    and its config loader, checked (fedmoo.cli.trusted.CheckedLoader)."""
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from fedmoo.cli.trusted import CheckedLoader

    if p.config_path and not p.config_path.startswith("pkg://"):
        init = initialize_config_dir(config_dir=p.config_path, version_base="1.3",
                                     job_name=JOB_NAME)
    else:
        init = initialize_config_module(config_module=(p.config_path or CONFIG_MODULE)
                                        .removeprefix("pkg://"), version_base="1.3",
                                        job_name=JOB_NAME)
    with init:
        yield CheckedLoader(GlobalHydra.instance().config_loader())


def check(p: Plan) -> None:
    """Compose ``p``'s configuration as ``@hydra.main`` will (for ``--cfg``, ``--hydra-help``,
    ...): ``Refused`` when it names foreign code or cannot be composed."""
    from fedmoo.errors import Refused

    from omegaconf import OmegaConf

    with loader(p) as checked:
        try:
            cfg = _compose(checked, p)
        except Exception as e:  # noqa: BLE001 - nothing Hydra cannot compose is handed to it
            from fedmoo.cli.overrides import hydra_error_line

            raise Refused(hydra_error_line(e, list(p.overrides))) from None
    words = [w for f in p.flags for w in f.split("=", 1)]   # --cfg job -p algo: Hydra exits 1
    package = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-p", "--package")),
                   None)
    if package not in (None, "_global_") and OmegaConf.select(cfg, package) is None:
        raise Refused(f"--package {package}: no such key in the config; `fedmoo run --cfg job` "
                      "shows the keys")


class Callbacks:
    """The ``hydra.callbacks`` of a configuration, each told of the run's events in Hydra's
    order (the ends in reverse); a callback that raises becomes a warning, as in Hydra.
    Launchers in other processes (joblib, submitit) get it pickled with their HydraContext."""

    def __init__(self, config: Any) -> None:
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        nodes = OmegaConf.select(config, "hydra.callbacks") or {}
        self.callbacks = [instantiate(node) for node in nodes.values()]

    def __getattr__(self, event: str) -> Callable[..., None]:
        """``on_run_start``, ``on_multirun_end``, ``on_job_start``, ...: tell every callback."""
        if not event.startswith("on_"):     # unpickling looks up before __dict__
            raise AttributeError(event)

        def notify(**kwargs: Any) -> None:
            for c in reversed(self.callbacks) if event.endswith("_end") else self.callbacks:
                try:
                    getattr(c, event)(**kwargs)
                except Exception as e:  # noqa: BLE001 - Hydra's rule: a callback never stops a run
                    warnings.warn(f"Callback {type(c).__name__}.{event} raised "
                                  f"{type(e).__name__}: {e}", stacklevel=2)

        return notify


def run(task_function: Callable, p: Plan) -> int:
    """Run ``task_function`` as Hydra's run or sweep of ``p``; returns the number of the sweep's
    jobs that failed or left no result (0 for a run). Errors propagate as under
    HYDRA_FULL_ERROR=1."""
    from hydra.core.plugins import Plugins
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext
    from omegaconf import OmegaConf

    from fedmoo.run.callbacks import SweepReport, failed_jobs

    with loader(p) as checked:
        cfg = _compose(checked, p)
        configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        callbacks = Callbacks(cfg)
        context = HydraContext(config_loader=checked, callbacks=callbacks)  # type: ignore[arg-type]
        if not p.multirun:
            callbacks.on_run_start(config=cfg, config_name=p.config_name)
            done = run_job(hydra_context=context, task_function=task_function, config=cfg,
                           job_dir_key="hydra.run.dir", job_subdir_key=None)
            callbacks.on_run_end(config=cfg, config_name=p.config_name, job_return=done)
            done.return_value      # raises the job's error, as Hydra's run does
            return 0
        started = time.time()
        callbacks.on_multirun_start(config=cfg, config_name=p.config_name)
        sweeper = Plugins.instance().instantiate_sweeper(config=cfg, hydra_context=context,
                                                         task_function=task_function)
        sweeper.sweep(arguments=OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
        callbacks.on_multirun_end(config=cfg, config_name=p.config_name)
        # the sweep report read every job's files already; without it (hydra.callbacks changed),
        # read them here
        report = next((c for c in callbacks.callbacks if isinstance(c, SweepReport)), None)
        if report is not None and report.failed is not None:
            return len(report.failed)
        return len(failed_jobs(Path(str(cfg.hydra.sweep.dir)), started))


def _compose(checked: Any, p: Plan) -> Any:
    """The run's configuration, or the sweep's. Hydra composes a sweep's without its swept
    values, so ``algo.q=1`` fails there when only a swept option (``+row/...=qfedavg_q5,...``)
    sets ``algo=qfedavg``: such an override is swept too, as ``algo.q=choice(1)`` (one value),
    and each job, composed whole, still refuses a key that does not exist."""
    import re

    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode

    overrides = list(p.overrides)
    while True:
        try:
            return checked.load_configuration(
                config_name=p.config_name, overrides=overrides,
                run_mode=RunMode.MULTIRUN if p.multirun else RunMode.RUN)
        except ConfigCompositionException as e:
            m = re.search(r"Could not override '([^']+)'", str(e))
            at = [i for i, o in enumerate(overrides) if m and p.multirun   # not hydra.*: no
                  and o.partition("=")[0] == m.group(1) and "," not in o   # option sets those
                  and "(" not in o and not o.startswith("hydra.")]
            if not at:
                raise
            key, _, value = overrides[at[0]].partition("=")
            overrides[at[0]] = f"{key}=choice({value})"
