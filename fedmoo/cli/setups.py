"""Paper setups (``setup=NAME``, conf/setup/): a paper's dataset, partition and run numbers, applied
only when named. ``fedmoo run`` says which setup it applied."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from fedmoo.cli.groups import group_options

log = logging.getLogger(__name__)

_said: set[tuple[Path, str]] = set()   # (sweep dir, line) said by a job of that sweep


def applied(choices: Mapping[str, Any]) -> str | None:
    """The line that says which setup a run's group ``choices`` applied (with its one-line
    description); None when it names none."""
    name = choices.get("setup")
    if not name:
        return None
    about = group_options("setup").get(name)
    return f"setup: {name}" + (f" ({about})" if about else "")


def announce(choices: Mapping[str, Any], sweep: Path | None = None) -> None:
    """Log ``applied(choices)`` at info level. In a sweep (``sweep``: its directory) a line said
    already by an earlier job in this process goes at debug level, so stderr gets it once and
    each job's fedmoo.log still does."""
    line = applied(choices)
    if line is None:
        return
    log.log(logging.DEBUG if (sweep, line) in _said else logging.INFO, "%s", line)
    if sweep is not None:
        _said.add((sweep, line))
