"""The config groups a user picks from (``algo=``, ``data=``, ...) and their options on disk."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("algo", "data", "partition", "setup", "model", "client", "attack", "experiment",
          "debug")


def group_options(group: str, folders: list[Path] | tuple[()] = ()) -> dict[str, str]:
    """``{option: description}`` of a config group: its declared components, then the YAML
    files (``sub/name``) of fedmoo's, the plugins' (``[plugin X]``) and the extra ``folders``."""
    from fedmoo.config import hparams, plugins

    out: dict[str, str] = {}
    if group in hparams.GROUPS:
        found = hparams.all_declared()
        for pkg in ["fedmoo", *plugins.names()]:
            mark = f" [plugin {pkg}]" if pkg != "fedmoo" else ""
            out.update({slug: d.description + mark for (g, slug), d in sorted(found.items())
                        if g == group and d.package == pkg and slug not in out})
    for plugin, conf in [(None, CONF_DIR), *plugins.conf_dirs(), *((None, f) for f in folders)]:
        root = conf / group
        for path in sorted(root.rglob("*.yaml")) if root.is_dir() else ():
            name = path.relative_to(root).with_suffix("").as_posix()
            if name not in out:
                out[name] = (describe_yaml(path) + (f" [plugin {plugin}]" if plugin else "")
                             ).strip()
    return out


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


def describe_yaml(path: Path) -> str:
    """The first comment sentence of a YAML file that is not a Hydra directive, nor the command
    that runs it (experiment files start with ``# fedmoo run -m experiment=...``, then say what
    they reproduce), unless there is no other: its first line, and the lines that go on with it
    (starting in lower case), so a description is never cut mid-sentence."""
    command, found = "", ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s.startswith("#"):
            break
        text = s.lstrip("#").strip()
        if found:
            if not text[:1].islower():
                break
            found += " " + text
        elif text.startswith("fedmoo "):
            command = command or text
        elif text and not text.startswith("@package"):
            found = text
    return found or command

