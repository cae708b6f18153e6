"""``fedmoo run -m ... hydra/launcher=lockstep``: the sweep's jobs trained together, in lockstep
(the work is fedmoo.cli.app's collect / run_together and fedmoo.run.group; Hydra finds launchers
only in ``hydra_plugins``). Two passes: each job goes through Hydra's ``run_job`` (directory,
``.hydra`` files, logging, callbacks), which only prepares it; then all run together and each
JobReturn gets its job's value (so a callback's ``on_job_end`` sees a job before it trained).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)


class LockstepLauncher(Launcher):
    def __init__(self, max_rows: int = 4096) -> None:
        from fedmoo.config.schema import check_launcher_options

        check_launcher_options({"max_rows": max_rows})   # declared knobs
        self.max_rows = max_rows
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        # task_function is fedmoo.cli.app.task; the launcher calls app.collect instead.
        self.config, self.hydra_context = config, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from fedmoo.cli.app import collect, run_together

        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs in lockstep (max_rows={self.max_rows})")
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            # all listed first: once run_job has run, the log goes to that job's fedmoo.log
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        returns: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            # fedmoo's sweeper (grid_sweeper) hands over the config its validation composed
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = idx
                cfg.hydra.job.num = idx
            returns.append(run_job(hydra_context=self.hydra_context, task_function=collect,
                                   config=cfg, job_dir_key="hydra.sweep.dir",
                                   job_subdir_key="hydra.sweep.subdir"))
        jobs = [r.return_value for r in returns]   # raises a job's error, as the basic launcher
        for r, value in zip(returns, run_together(jobs, self.max_rows)):
            r.return_value = value
        return returns
