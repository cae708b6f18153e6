"""The config groups a user picks from (``algo=``, ``data=``, ...) and their options on disk."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("algo", "data", "partition", "model", "client", "attack", "experiment", "debug")


def group_options(group: str) -> dict[str, str]:
    """Options of a config group (nested folders give ``sub/name``) with their descriptions."""
    root = CONF_DIR / group
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*.yaml")):
        name = path.relative_to(root).with_suffix("").as_posix()
        out[name] = describe_yaml(path)
    return out


def describe_yaml(path: Path) -> str:
    """The first comment line of a YAML file that is not a Hydra directive."""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s.startswith("#"):
            break
        text = s.lstrip("#").strip()
        if text and not text.startswith("@package"):
            return text
    return ""
