"""Compose fedmoo's Hydra config outside ``fedmoo run`` (describe, tests, adapters), and the
plugins' config folders every composition searches."""

from __future__ import annotations

from typing import Any

from fedmoo.errors import UserError


def compose(overrides: list[str] | tuple[str, ...] = (), resolve: bool = True,
            hydra: bool = False) -> dict[str, Any]:
    """The resolved config ``fedmoo run OVERRIDES`` would use, as a plain dict (with its
    ``hydra`` node only if ``hydra``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="fedmoo.conf", version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=with_plugins(list(overrides)),
                                return_hydra_config=hydra)
        return OmegaConf.to_container(cfg, resolve=resolve)
    except (HydraException, OmegaConfBaseException) as e:
        from fedmoo.config import schema

        raise UserError(schema.type_refusal(e)
                        or f"invalid configuration: {str(e).splitlines()[0]}") from None
    finally:
        GlobalHydra.instance().clear()


def with_plugins(args: list[str]) -> list[str]:
    """``args`` with the plugins' conf folders added to ``hydra.searchpath``, in one override
    (merged with those the command line gives, in their order)."""
    from fedmoo.config import plugins

    extra = plugins.search_path()
    out, given, n = [], [], 0
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key.lstrip("+") == "hydra.searchpath":
            given += [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]
            n += 1
        else:
            out.append(a)
    if not extra and n < 2:
        return list(args)
    return out + [f"hydra.searchpath=[{','.join(dict.fromkeys(given + extra))}]"]
