"""fedmoo's sweeper (``hydra/sweeper=fedmoo``, the default): the grid of Hydra's basic sweeper
(``fedmoo.cli.overrides.grid``), in batches of ``max_batch_size`` jobs, each job's configuration
composed once. Before a batch is launched every job of it is composed and checked (a bad job
stops the sweep before any job of the batch runs); Hydra's basic sweeper throws those away and
the launcher composes each again (0.3-0.5 s a job). Here ``KeptConfigs``, the config loader
handed to the launcher, returns each kept one once to a launcher in this process; a launcher in
other processes (joblib, submitit) composes there. Hydra imports this module at start-up:
nothing heavy at module level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.plugins.sweeper import Sweeper

from fedmoo.cli.trusted import LoaderProxy


class KeptConfigs(LoaderProxy):
    """Hydra's config loader with the configurations of one batch kept: ``load_sweep_config``
    returns a kept one once (same master config and overrides), else composes. The kept ones
    stay in this process (a pickled copy has none)."""

    def __init__(self, loader: ConfigLoader) -> None:
        super().__init__(loader)
        self.master: Any = None
        self.kept: dict[tuple[str, ...], Any] = {}

    def keep(self, master_config: Any, batch: Sequence[Sequence[str]]) -> list[Any]:
        """Compose every job of ``batch`` (the batch kept before is dropped); their configs."""
        self.master, self.kept = master_config, {}
        for overrides in batch:
            self.kept[tuple(overrides)] = self.loader.load_sweep_config(master_config,
                                                                        list(overrides))
        return list(self.kept.values())

    def load_sweep_config(self, master_config: Any, sweep_overrides: list[str]) -> Any:
        if master_config is self.master:
            cfg = self.kept.pop(tuple(sweep_overrides), None)
            if cfg is not None:
                return cfg
        return self.loader.load_sweep_config(master_config, sweep_overrides)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "master": None, "kept": {}}


class GridSweeper(Sweeper):
    def __init__(self, max_batch_size: int | None = None,
                 params: dict[str, str] | None = None) -> None:
        from fedmoo.config.knobs import integer
        from fedmoo.errors import UserError

        if max_batch_size == -1:          # Hydra's basic sweeper reads -1 as null
            max_batch_size = None
        if max_batch_size is not None and not (integer(max_batch_size) and max_batch_size >= 1):
            raise UserError(f"hydra.sweeper.max_batch_size={max_batch_size!r} must be a positive "
                            "integer (jobs launched at once) or null (all)")
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.config: Any = None
        self.launcher: Any = None
        self.loader: KeptConfigs | None = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins
        from hydra.types import HydraContext

        self.config = config
        self.loader = KeptConfigs(hydra_context.config_loader)
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=HydraContext(config_loader=self.loader, callbacks=hydra_context.callbacks),
            task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> list[Sequence[Any]]:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import OmegaConf

        from fedmoo.cli.app import sweep_started
        from fedmoo.cli.overrides import grid

        assert self.config is not None and self.launcher is not None
        parser = OverridesParser.create(config_loader=self.loader)
        given = parser.parse_overrides(list(arguments))
        jobs = grid(parser.parse_overrides([f"{k}={v}" for k, v in self.params.items()]) + given)
        size = self.max_batch_size or max(len(jobs), 1)
        self.validate_batch_is_legal(jobs[:size])   # a bad job: no sweep directory either
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        with _one_sweep_in(sweep_dir):
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            sweep_started(sweep_dir, len(jobs),
                          [o.key_or_group for o in given if o.is_sweep_override()])
            returns = []
            for first in range(0, len(jobs), size):
                batch = jobs[first:first + size]
                if first:
                    self.validate_batch_is_legal(batch, first)
                results = self.launcher.launch(batch, initial_job_idx=first)
                for r in results:
                    r.return_value     # raises a job's error, as Hydra's basic sweeper does
                returns.append(results)
            return returns

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]], first: int = 0) -> None:
        """Compose every job of ``batch`` (kept for the launcher; its first job is number
        ``first``): a job that cannot be composed, or whose directory holds another
        configuration's result, stops the sweep before the batch runs."""
        from fedmoo.cli.precheck import check_collisions, check_composed

        assert self.loader is not None
        configs = self.loader.keep(self.config, batch)
        for cfg in configs:
            check_composed(cfg)     # fedmoo.config.schema.check: a bad value refuses the sweep
        check_collisions(configs, first)


def _one_sweep_in(sweep_dir: Path):
    """The sweep folder's lock, held while the sweep runs: a second sweep started in the same
    folder meanwhile is refused in one line (their jobs, counts and multirun.yaml would mix)."""
    from fedmoo.errors import Refused
    from fedmoo.run import locks

    path = sweep_dir / ".fedmoo" / "sweep.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    held = locks.try_lock(path)
    if held is None:
        raise Refused(f"hydra.sweep.dir={sweep_dir} is in use by another sweep "
                      f"({locks.holder(path)}): wait for it to end, or give this sweep another "
                      "hydra.sweep.dir")
    return held
