"""The config groups a user picks from (``algo=``, ``data=``, ...) and their options on disk."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("algo", "data", "partition", "setup", "model", "client", "attack", "experiment",
          "debug")


def group_options(group: str, folders: list[Path] | tuple[()] = ()) -> dict[str, str]:
    """Options of a config group (nested folders give ``sub/name``) with their descriptions
    (the YAML's first comment; for a plugin's algorithm without one, its class's description):
    fedmoo's own, then those of the declared plugins' conf folders (marked ``[plugin X]``), then
    those of the config ``folders`` a command line adds."""
    from fedmoo import plugins

    out: dict[str, str] = {}
    for plugin, conf in [(None, CONF_DIR), *plugins.conf_dirs(), *((None, f) for f in folders)]:
        root = conf / group
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.yaml")):
            name = path.relative_to(root).with_suffix("").as_posix()
            if name not in out:
                mark = f" [plugin {plugin}]" if plugin else ""
                text = describe_yaml(path) or (registered_description(group, name) if plugin
                                               else "")
                out[name] = (text + mark).strip()
    return out


def registered_description(group: str, name: str) -> str:
    """A plugin algorithm's own one-line description, for an option whose YAML has no comment:
    the class's own ``description`` (not one it inherits), else the first paragraph of its
    docstring ('' if no such algorithm is registered). Imports the algorithms (torch): only
    in that case."""
    if group != "algo":
        return ""
    from fedmoo import algorithms
    from fedmoo.errors import UserError

    try:
        cls = algorithms.get(name)
    except UserError:
        return ""
    text = cls.__dict__.get("description") or (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(str(text).split())


def with_plugins(args: list[str]) -> list[str]:
    """``args`` with the plugins' conf folders added to ``hydra.searchpath``, in one override
    (merged with those the command line gives, in their order)."""
    from fedmoo import plugins

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


def describe_yaml(path: Path) -> str:
    """The first comment line of a YAML file that is not a Hydra directive, nor the command
    that runs it (experiment files start with ``# fedmoo run -m experiment=...``, then say what
    they reproduce), unless there is no other."""
    command = ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s.startswith("#"):
            break
        text = s.lstrip("#").strip()
        if text.startswith("fedmoo "):
            command = command or text
        elif text and not text.startswith("@package"):
            return text
    return command

