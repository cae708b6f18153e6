"""The value a config key takes when a job's record does not hold it.

A job written before a key existed must still be grouped with the jobs of its configuration, so
the reports fill the keys it lacks from fedmoo's config: a top-level key from its declaration
(``fedmoo.config.schema``), a group's key (``algo.mu``) from the file of the option the job names
(a plugin's ``conf/algo/<slug>.yaml``), else from the declaration of that
component (``fedmoo.config.hparams``). An interpolation (``${num_clients}``) stays missing.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
MISSING = object()


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algo": {"alpha": 0.1}}`` -> ``{"algo.alpha": 0.1}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@lru_cache(maxsize=None)
def _read(path: Path, group: str) -> dict[str, Any]:
    """The flattened values of a config file (of ``group``'s package), ``{}`` if unreadable."""
    try:
        text = path.read_text()
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(data, dict):
        return {}
    data = {k: v for k, v in data.items() if k not in ("defaults", "hydra")}
    if "@package _global_" in text.split("\n\n", 1)[0]:
        data = data.get(group) if isinstance(data.get(group), dict) else {}
    return flatten(data)


def _conf_dirs() -> list[Path]:
    from fedmoo.config import plugins

    try:
        return [CONF_DIR, *(d for _, d in plugins.conf_dirs())]
    except Exception:  # noqa: BLE001 - a broken plugin declaration: fedmoo's own tree only
        return [CONF_DIR]


def default(key: str, flat: dict[str, Any]) -> Any:
    """The value ``key`` (dotted) has by default in a job whose flattened config is ``flat``;
    ``MISSING`` when fedmoo's config tree does not say."""
    group, _, rest = key.partition(".")
    if not rest:
        return _usable(_top_level().get(key, MISSING))
    option = flat.get(f"{group}.name")
    if not isinstance(option, str) or not option or "/" in option or option[0] == ".":
        return MISSING
    for conf in _conf_dirs():
        values = _read(conf / group / f"{option}.yaml", group)
        if rest in values:
            return _usable(values[rest])
    return _declared(group, option).get(rest, MISSING)


@lru_cache(maxsize=None)
def _declared(group: str, slug: str) -> dict[str, Any]:
    """The declared defaults of a component's hyperparameters (fedmoo.config.hparams), by key."""
    from fedmoo.config import hparams

    try:
        return {k.key.partition(".")[2]: _usable(k.default) for k in hparams.knobs(group, slug)}
    except Exception:  # noqa: BLE001 - a broken plugin declaration: nothing is known
        return {}


@lru_cache(maxsize=None)
def _top_level() -> dict[str, Any]:
    """The top-level knobs' declared defaults (fedmoo.config.schema)."""
    from fedmoo.config import schema

    return {k.key: k.default for k in schema.knobs() if "." not in k.key}


def _usable(v: Any) -> Any:
    """An interpolation (``${num_clients}``) says nothing of an older job: MISSING."""
    return MISSING if isinstance(v, str) and "${" in v else v
