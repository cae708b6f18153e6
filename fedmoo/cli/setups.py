"""Paper setups (``setup=NAME``, conf/setup/): a paper's dataset, partition and run numbers, applied
only when named. ``fedmoo run`` says which setup it applied.

Before, choosing some data + partition pairs applied a setup silently (an optional
``partition_preset`` group chosen by ``${data}_${partition}``): ``data=cifar10
partition=dirichlet`` switched to AdaFed's setup 2. Those pairs now get one line naming the setup
to add, and a ``partition_preset=`` override is refused with one line naming ``setup=``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from fedmoo.cli.groups import group_options

log = logging.getLogger(__name__)

# (data, partition) -> the setup that pair applied by itself until partition_preset was removed.
FORMER_PRESETS = {
    ("cifar10", "dirichlet"): "adafed_cifar10_dirichlet",
    ("cifar10", "shards"): "fedmgda_plus_cifar10_shards",
    ("femnist", "femnist_skewed"): "adafed_femnist_skewed",
    ("fmnist", "one_class_per_client"): "fedfv_fmnist_one_class_per_client",
    ("fmnist", "shards"): "fedmgda_plus_fmnist_shards",
    ("mnist", "shards"): "fedfv_mnist_shards",
    ("tinyimagenet", "dirichlet"): "adafed_tinyimagenet_dirichlet",
}
_said: set[tuple[Path, str]] = set()   # (sweep dir, line) said by a job of that sweep


def applied(choices: Mapping[str, Any]) -> str | None:
    """The line that says which setup a run's group ``choices`` applied (with its one-line
    description), or that its data + partition pair no longer applies one; None when neither."""
    name = choices.get("setup")
    if name:
        about = group_options("setup").get(name)
        return f"setup: {name}" + (f" ({about})" if about else "")
    data, partition = choices.get("data"), choices.get("partition")
    former = FORMER_PRESETS.get((data, partition))
    if former is None:
        return None
    return (f"data={data} partition={partition} no longer applies a paper's setup; add "
            f"setup={former} for it ({group_options('setup').get(former, '')})")


def announce(choices: Mapping[str, Any], sweep: Path | None = None) -> None:
    """Log ``applied(choices)``: a named setup at info level, a former preset's pair as a
    warning. In a sweep (``sweep``: its directory) a line said already by an earlier job in this
    process goes at debug level, so stderr gets it once and each job's fedmoo.log still does."""
    line = applied(choices)
    if line is None:
        return
    level = logging.INFO if choices.get("setup") else logging.WARNING
    if sweep is not None:
        if (sweep, line) in _said:
            level = logging.DEBUG
        _said.add((sweep, line))
    log.log(level, "%s", line)


def check_preset_override(arg: str) -> str | None:
    """The message for an override of the removed ``partition_preset`` group (None for any
    other override)."""
    key, _, value = arg.partition("=")
    if key.lstrip("+~") != "partition_preset":
        return None
    name = value.strip().strip("'\"")
    pair = next((p for p in FORMER_PRESETS if "_".join(p) == name), None)
    target = f"setup={FORMER_PRESETS[pair]}" if pair else "setup=NAME (`fedmoo list setup`)"
    if key.startswith("~"):
        return (f"{arg}: partition_preset is gone and a partition applies no paper setup any "
                "more; remove it")
    return (f"{arg}: partition_preset is gone; paper setups are named with setup=: use "
            f"{target}")
