"""A sweep's jobs: the override list of every job of a grid (fedmoo's sweeper, ``fedmoo prepare``)."""

from __future__ import annotations

import itertools
from typing import Any, Sequence


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
