"""`fedmoo run` overrides: checks Hydra does not make, one-line messages for Hydra's errors, and
a sweep's jobs (``grid``: fedmoo's sweeper, ``fedmoo prepare``).

Hydra prints its composition errors as a multi-line block and exits with status 1; the CLI makes
it raise them instead (HYDRA_FULL_ERROR) and prints ``hydra_error_line`` with status 2.
"""

from __future__ import annotations

import difflib
import itertools
import re
from pathlib import Path
from typing import Any, Sequence

from fedmoo.cli.groups import CONF_DIR, GROUPS, group_options


def check_overrides(args: list[str]) -> str | None:
    """Reject `group=option` overrides that name no option (Hydra's own message is a traceback-
    like block), and words that are not overrides; returns an error message or None."""
    folders = config_folders(args)
    for i, arg in enumerate(args):
        if arg.startswith("-") or (i and args[i - 1] in VALUED):  # a flag, --cfg job's value
            continue
        if "=" not in arg:                   # usually a value's rest after a space
            prev = args[i - 1] if i else ""
            if "=" not in prev:
                return f"{arg!r} is not an override (key=value); see `fedmoo run --help`"
            key, _, value = prev.partition("=")
            return (f"{arg!r} is not an override (key=value): a value with spaces must be quoted "
                    f"as a whole, e.g. '{key}=\"{value} {arg}\"' (single quotes for the shell, "
                    "double quotes for Hydra)")
        key, _, value = arg.partition("=")
        key = key.lstrip("+~")
        is_row = key.startswith("row/")   # a paper table's rows: conf/row/<paper>/<table>/
        if (key not in GROUPS and not is_row) or value in ("", "null"):
            continue
        options = group_options(key, folders)
        where = f"fedmoo/conf/{key}/" if is_row else f"`fedmoo list {key}`"
        for choice in value.split(","):
            choice = choice.strip().strip("'\"")
            if choice.startswith(("range(", "choice(", "glob(", "interval(")):
                continue
            if choice not in options:
                return (f"unknown {key} {choice!r}; choose one of: "
                        f"{', '.join(options) or '(no such row group)'} (see {where})")
    return None


def config_folders(args: list[str]) -> list[Path]:
    """The config folders the command line adds: ``--config-dir`` / ``--config-path`` and the
    ``file://`` entries of ``hydra.searchpath``."""
    out = []
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key in ("-cd", "--config-dir", "-cp", "--config-path"):
            out.append(Path(value if eq else args[i + 1] if i + 1 < len(args) else ""))
        elif eq and key.lstrip("+") == "hydra.searchpath":
            out += [Path(v.strip()[len("file://"):]) for v in value.strip("[]").split(",")
                    if v.strip().startswith("file://")]
    return out


def aliases(args: list[str]) -> list[str]:
    """``debug=true`` / ``debug=false`` (Hydra would read a boolean, not a group option);
    ``--info TOPIC`` (``-i``) as ``--info=TOPIC`` (its optional topic is no override)."""
    out: list[str] = []
    for a in args:
        if out and out[-1] in ("--info", "-i") and "=" not in a and not a.startswith("-"):
            out[-1] = f"--info={a}"
        elif a.lower() != "debug=false":
            out.append("debug=traceback" if a.lower() == "debug=true" else a)
    return out


def top_level_keys() -> set[str]:
    """The schema's top-level keys, the groups of config.yaml's defaults list, the CLI's groups,
    hydra."""
    from omegaconf import OmegaConf

    from fedmoo.config import schema

    cfg = OmegaConf.load(CONF_DIR / "config.yaml")
    keys = schema.top_level_keys() | {k for k in cfg if k != "defaults"}
    for entry in cfg.get("defaults", []):
        if isinstance(entry, str) or not entry:
            continue
        name = next(iter(entry)).replace("optional ", "").replace("override ", "").strip()
        keys.add(name.split("@")[0])
    return keys | set(GROUPS) | {"hydra", "row"}  # row: +row/<paper>/<table>=<row> (conf/row)


def check_new_keys(args: list[str]) -> str | None:
    """Reject ``+key=value`` that adds a top-level key nothing reads (Hydra accepts it)."""
    known: set[str] | None = None
    for arg in args:
        if not arg.startswith("+") or "=" not in arg:
            continue
        top = re.split(r"[./@]", arg.lstrip("+").partition("=")[0], maxsplit=1)[0]
        known = known or top_level_keys()
        if top not in known:
            close = difflib.get_close_matches(top, sorted(known), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            return (f"{arg!r} adds a config key {top!r} that fedmoo does not use; {hint}"
                    "remove it (`fedmoo run --cfg job` shows the valid keys)")
    return None


# Hydra options that take a value (``--cfg job``), skipped by the checks and kept with it.
VALUED = {"-c", "--cfg", "-p", "--package", "-cd", "--config-dir", "-cn", "--config-name", "-cp",
          "--config-path"}


def group_choice(arg: str) -> str:
    """``debug=true`` -> ``debug='true'``: Hydra reads an unquoted true/false as a boolean,
    which it refuses as a config group choice."""
    key, eq, value = arg.partition("=")
    if eq and key.lstrip("+~") in GROUPS and value in ("true", "false"):
        return f"{key}='{value}'"
    return arg


def node_keys(args: list[str], dotted: str, swept: str | None) -> list[str]:
    """Keys of the config node ``dotted`` once the group choices in ``args`` are applied; for a
    group swept over several options (``swept``: ``digits,synthetic``), the keys every one has."""
    from fedmoo.cli.config import compose

    choices = [group_choice(a) for a in args
               if "=" in a and a.partition("=")[0].lstrip("+") in GROUPS and "," not in a]
    top = dotted.split(".")[0]
    found: list[set[str]] = []
    for option in swept.split(",") if swept else [None]:
        node = compose(choices + ([f"{top}={option.strip()}"] if option else []), resolve=False)
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        found.append(set(node) if isinstance(node, dict) else set())
    return sorted(set.intersection(*found))


def hydra_error_line(e: BaseException, args: list[str]) -> str:
    """One line for an error Hydra raised while composing the config or making the run dir."""
    import yaml

    from fedmoo.config import schema
    from fedmoo.errors import UserError

    if isinstance(e.__cause__, UserError):   # a plugin Hydra instantiated checked its values
        return str(e.__cause__)
    if wrong_type := schema.type_refusal(e):      # rounds=abc: the schema's own line
        return wrong_type
    bad_yaml = e      # a config file that is not plain YAML (a tag such as !!python/..., a typo)
    while bad_yaml is not None and not isinstance(bad_yaml, yaml.YAMLError):
        bad_yaml = bad_yaml.__cause__ or bad_yaml.__context__
    if bad_yaml is not None:
        mark = getattr(bad_yaml, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(bad_yaml, "problem", None) or str(bad_yaml).splitlines()[0]
        return (f"{where}{problem}; a config file holds plain YAML values only (no tags such as "
                "!!python/...)")
    text = str(e)
    if swept := re.match(r"Ambiguous value for argument '([^']*)'", text):   # seed=0,1
        return (f"{swept.group(1)} gives several values: sweep them with -m (one job each), or "
                "write a list value as key=[a,b]; --cfg shows one job's config: give one value")
    if "hydra.launcher.invariant" in text:     # removed with its second arithmetic (CHANGELOG)
        return ("hydra.launcher.invariant is gone: a lockstep group's jobs always give each "
                "job's numbers alone, bit for bit (CHANGELOG); drop it")
    m = re.search(r"Could not override '([^']+)'", text)
    if m and re.search(r"not in struct|Key '[^']*' not in '", f"{text} {e.__cause__}"):
        key = m.group(1)
        parent, _, leaf = key.rpartition(".")
        if parent == "engine":    # `engine` holds a name; its options come as one section
            return (f"{key} cannot be set on its own: write the engine with its options, "
                    f"'engine={{name:batched,{leaf}:VALUE}}'")
        swept = next((a.partition("=")[2] for a in args if "," in a
                      and a.partition("=")[0].lstrip("+") == key.split(".")[0]), None)
        try:
            keys = node_keys(args, parent, swept) if parent else sorted(top_level_keys())
        except Exception:  # noqa: BLE001 - the key list is only a hint
            keys = []
        close = difflib.get_close_matches(leaf, keys, n=1)
        hint = f"did you mean {(parent + '.') if parent else ''}{close[0]}? " if close else ""
        of = f" of {parent}" + (f" (in every {key.split('.')[0]}={swept})" if swept else "")
        valid = f"valid keys{of if parent else ''}: {', '.join(keys)}; " if keys else ""
        return f"{key} is not a config key; {hint}{valid}see `fedmoo run --cfg job`"
    missing = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
    if missing and "Available options" in text:   # a group option that does not exist
        options = re.findall(r"^\t(\S+)$", text.split("Available options", 1)[1], re.M)
        return (f"unknown {missing.group(1)} {missing.group(2)!r}; choose one of: "
                f"{', '.join(options)}")
    from hydra.errors import MissingConfigException

    if isinstance(e, MissingConfigException):    # an IOError too, but no file of the user's
        return (f"{str(e).splitlines()[0]} (a config folder of yours: --config-dir DIR or "
                "hydra.searchpath=[file:///abs/dir])")
    if isinstance(e.__cause__, OSError) and not isinstance(e, OSError):
        e = e.__cause__  # e.g. logging could not open its file in the run directory
    if isinstance(e, OSError):
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        return (f"cannot write the output directory{where} ({e.strerror or e}); set "
                "hydra.run.dir (or hydra.sweep.dir for -m) to a writable path")
    lines = [s for s in itertools.takewhile(lambda s: not s.startswith((
        "Config search path", "Set the environment", "full_key", "object_type")),
        map(str.strip, text.splitlines())) if s]
    if e.__cause__ is not None and str(e.__cause__).strip():
        cause = str(e.__cause__).strip().splitlines()[0]
        if cause not in lines:
            lines.append(cause)
    return " ".join(lines) + " (see `fedmoo run --help` and `fedmoo list`)"


def from_hydra(e: BaseException) -> bool:
    """Whether an exception comes from Hydra / OmegaConf / making the output directory (a user
    mistake), not from the job (fedmoo.cli.app handles those; anything else is a bug)."""
    tb = e.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.startswith("fedmoo.") and module not in ("fedmoo.cli.main",
                                                           "fedmoo.cli.hydra_run",
                                                           "fedmoo.cli.trusted"):
            return False
        tb = tb.tb_next
    return True


def grid(overrides: Sequence[Any]) -> list[list[str]]:
    """Every job's overrides from parsed ``overrides`` (Hydra's ``Override``s): the cartesian
    product of their values, the first key varying slowest; a key given twice keeps its first
    place and its last value (Hydra's basic sweeper's grid). A comma list, ``range(...)`` and
    ``choice(...)`` are swept; an interval cannot be (UserError)."""
    from fedmoo.errors import UserError

    values: dict[str, list[str]] = {}
    for o in overrides:
        key = o.get_key_element()
        if not o.is_sweep_override():
            values[key] = [f"{key}={o.get_value_element_as_str()}"]
        elif o.is_discrete_sweep():
            values[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            kind = o.value_type.name if o.value_type is not None else "this sweep"
            raise UserError(f"{key}: fedmoo's sweeper does not sweep {kind} (use a comma "
                            "list, range(...) or choice(...))")
    return [list(job) for job in itertools.product(*values.values())]
