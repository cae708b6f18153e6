"""fedmoo's sweeper: Hydra's basic sweeper, with each job of a sweep composed once, not twice.

The basic sweeper composes every job of a batch to validate it (``validate_batch_is_legal``) and
throws the configs away; then a launcher in the same process (Hydra's basic one, fedmoo's
lockstep one) composes each job again. With fedmoo's config tree a composition costs 0.3-0.5 s,
most of the start-up of a paper's sweep of 65-100 jobs. Here the validation keeps its configs,
and the config loader that Hydra hands to the launcher returns each one once, to the launcher's
call with the same master config and overrides; any other call composes as before (a launcher
in other processes composes its jobs there). ``max_batch_size`` bounds the configs kept at once.
"""

from __future__ import annotations

from typing import Any, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class ComposeOnceSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        assert self.hydra_context is not None and self.config is not None
        from fedmoo.cli.precheck import check_composed

        kept = _kept(self.hydra_context.config_loader)
        kept.clear()       # a batch's configs are used by its own launch only
        for overrides in batch:
            cfg = kept.compose(self.config, list(overrides))
            check_composed(cfg)     # a bad value refuses the sweep before any job runs
            kept[(id(self.config), tuple(overrides))] = cfg
        if self.batch_index == 1:    # the sweep's first batch: its jobs' progress starts
            from fedmoo.cli.app import sweep_started

            sweep_started(self.config, sum(len(b) for b in self.overrides or []))


class _Kept(dict):
    """The configs composed by the validation, by (master config, overrides)."""

    def __init__(self, compose: Any):
        super().__init__()
        self.compose = compose


def _kept(loader: Any) -> _Kept:
    """The loader's kept configs; the first call wraps its ``load_sweep_config`` to take them."""
    kept = getattr(loader, "_fedmoo_kept", None)
    if kept is None:
        kept = loader._fedmoo_kept = _Kept(loader.load_sweep_config)

        def load_sweep_config(master_config: Any, sweep_overrides: list[str]) -> Any:
            cfg = kept.pop((id(master_config), tuple(sweep_overrides)), None)
            return cfg if cfg is not None else kept.compose(master_config, sweep_overrides)

        loader.load_sweep_config = load_sweep_config
    return kept
