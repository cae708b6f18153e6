"""Compose fedmoo's Hydra config outside ``fedmoo run`` (describe, tests, adapters)."""

from __future__ import annotations

from typing import Any

from fedmoo.cli.groups import with_plugins
from fedmoo.errors import UserError


def compose(overrides: list[str] | tuple[str, ...] = (), resolve: bool = True) -> dict[str, Any]:
    """The resolved config ``fedmoo run OVERRIDES`` would use, as a plain dict (no hydra key)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=with_plugins(list(overrides)))
        return OmegaConf.to_container(cfg, resolve=resolve)
    except (HydraException, OmegaConfBaseException) as e:
        from fedmoo.config import schema

        raise UserError(schema.type_refusal(e)
                        or f"invalid configuration: {str(e).splitlines()[0]}") from None
    finally:
        GlobalHydra.instance().clear()
