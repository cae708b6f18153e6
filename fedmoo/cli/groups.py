"""The config groups a user picks from (``algo=``, ``data=``, ...), their options on disk and what
one option sets (``fedmoo list GROUP OPTION``)."""

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


def option_text(group: str, option: str) -> str:
    """What ``fedmoo list GROUP OPTION`` prints: for a component's option (algo, attack, model,
    data, partition), each hyperparameter the option composes to, its default when the option
    changes it, and its help (fedmoo.config.hparams); for the other groups, the option's file."""
    from fedmoo.cli.config import compose
    from fedmoo.config import hparams, plugins
    from fedmoo.config.knobs import show
    from fedmoo.errors import UserError
    from fedmoo.report.checks import did_you_mean

    options = group_options(group)
    if option not in options:
        raise UserError(f"{group} has no option {option!r}{did_you_mean(option, options)}; "
                        f"see `fedmoo list {group}`")
    head = f"{group}={option}: {options[option]}".rstrip(": ")
    if group not in hparams.GROUPS:
        for conf in [CONF_DIR, *(d for _, d in plugins.conf_dirs())]:
            path = conf / group / f"{option}.yaml"
            if path.is_file():
                return f"{head}\n{path.read_text().rstrip()}"
    section = compose([f"{group}={option}"])[group]
    ks = hparams.knobs(group, section.get("name", option))
    if not ks:
        return f"{head}\n  (no hyperparameters)"
    rows = []
    for k in ks:
        value = section.get(k.leaf, k.default)
        note = "" if show(value) == show(k.default) else f" (declared default {show(k.default)})"
        rows.append((f"{k.key}={show(value)}", k.help + note))
    width = max(len(a) for a, _ in rows)
    return "\n".join([head, *(f"  {a:<{width}}  {b}" for a, b in rows)])
