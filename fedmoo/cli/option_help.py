"""``fedmoo list GROUP OPTION``: what one option of a config group sets."""

from __future__ import annotations

from fedmoo.cli.groups import CONF_DIR, group_options
from fedmoo.errors import UserError
from fedmoo.report.checks import did_you_mean


def option_text(group: str, option: str) -> str:
    """What ``fedmoo list GROUP OPTION`` prints: for a component's option (algo, attack, model,
    data, partition), each hyperparameter the option composes to, its default when the option
    changes it, and its help (fedmoo.config.hparams); for the other groups, the option's file."""
    from fedmoo.config import hparams, plugins
    from fedmoo.cli.config import compose
    from fedmoo.config.knobs import show

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
