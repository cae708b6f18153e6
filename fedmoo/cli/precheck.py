"""The config of ``fedmoo run`` checked (``fedmoo.config.schema.check``) before Hydra makes a
directory or torch is imported: ``CheckConfig`` (``hydra.callbacks.check_config``) in a run's
``on_run_start`` and a sweep's ``on_multirun_start``, and fedmoo's sweeper calls
``check_composed`` for each job before any job runs.
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from fedmoo.config import schema
from fedmoo.errors import Refused, UserError


def check_composed(config: DictConfig, check=schema.check) -> None:
    """``check`` (``schema.check``) on a config Hydra composed (its ``hydra`` node left out); a
    refusal is raised as ``Refused``. A value that cannot be resolved yet (``${hydra:job.num}``
    before the job starts) leaves the check to the run, which makes it again."""
    cfg = _task(config)
    if cfg is None:
        return
    try:
        check(cfg)
    except UserError as e:
        raise Refused(str(e)) from None


def _task(config: DictConfig) -> dict[str, Any] | None:
    """The job's own config, resolved (its ``hydra`` node left out); None if a value cannot be
    resolved yet."""
    try:
        return {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                for k, v in ((k, config[k]) for k in config if k != "hydra")}
    except OmegaConfBaseException:
        return None


def check_collisions(configs: list[DictConfig], first: int = 0) -> None:
    """Refuse a sweep (``Refused``, before any of its jobs runs) whose jobs ``first``,
    ``first + 1``, ... would land on results of other configurations: an experiment's fixed
    sweep folder run again with other overrides (job 3 is another configuration now). Names the
    jobs and the one override that fixes it."""
    from fedmoo.run.identity import collisions

    jobs = []
    for num, config in enumerate(configs, first):
        with open_dict(config):
            config.hydra.job.num = num      # what the launcher sets: the job's subdir
        path = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
        if not (path / "summary.json").is_file():
            continue
        cfg = _task(config)
        if cfg is not None:                 # else left to the job's own check
            jobs.append((num, path, cfg))
    bad = collisions(jobs)
    if not bad:
        return
    sweep_dir = Path(str(configs[0].hydra.sweep.dir))
    free = next(f"{sweep_dir}_{i}" for i in range(2, 10_000) if not Path(f"{sweep_dir}_{i}").exists())
    num, path, diff = bad[0]
    raise Refused(
        f"{len(bad)} of {len(configs)} jobs of this sweep would land on results of another "
        f"configuration in {sweep_dir} (jobs {_spans([n for n, _, _ in bad])}; job {num}, "
        f"{path.name}/: {diff}): add hydra.sweep.dir={free} to run this sweep in its own "
        "folder (or resume=false to replace those results)")


def _spans(nums: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1-3, 7``."""
    runs = [[n for _, n in g] for _, g in groupby(enumerate(nums), lambda p: p[1] - p[0])]
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


class CheckConfig(Callback):
    """Hydra callback: the run's config is checked before its run directory exists."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_composed(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A sweep's config without its swept values (Hydra leaves them out until each job is
        composed): a knob refused there is refused in every job, so the sweep is refused before
        Hydra makes its directory. Only each knob alone: a pair (clients_per_round against
        num_clients) may be fixed by a swept value, and the sweeper checks each job whole."""
        check_composed(config, schema.check_knobs)
