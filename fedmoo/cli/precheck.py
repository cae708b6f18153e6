"""The config of ``fedmoo run`` checked by ``fedmoo.config.schema.check`` before Hydra makes a
directory.

In a single run the callbacks' ``on_run_start`` is called after the config is composed and
before ``run_job`` creates the run directory (by fedmoo.cli.hydra_run, and by Hydra itself on
the ``@hydra.main`` path), so ``CheckConfig`` (``hydra.callbacks.check_config`` in
conf/config.yaml) refuses a bad value there; in a sweep ``on_multirun_start`` checks the values
every job shares before the sweep directory exists, and fedmoo's sweeper calls
``check_composed`` for each job before any job runs. Either way the run loop never sees the config, nothing is written, and torch is not
imported.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedmoo.config import schema
from fedmoo.errors import Refused, UserError


def check_composed(config: DictConfig, check=schema.check) -> None:
    """``check`` (``schema.check``) on a config Hydra composed (its ``hydra`` node left out); a
    refusal is raised as ``Refused``. A value that cannot be resolved yet (``${hydra:job.num}``
    before the job starts) leaves the check to the run, which makes it again."""
    try:
        cfg = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
               for k, v in ((k, config[k]) for k in config if k != "hydra")}
    except OmegaConfBaseException:
        return
    try:
        check(cfg)
    except UserError as e:
        raise Refused(str(e)) from None


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
