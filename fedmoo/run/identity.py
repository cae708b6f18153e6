"""What makes two runs one run: the configuration keys that decide a run's numbers.

A run, its resume and a sweep about to start (``collisions``) compare the configuration asked
for with the one recorded in the run directory. Torch-free: the sweeper checks here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedmoo.report.defaults import flatten
from fedmoo.report.results import read_summary, to_jsonable

# Knobs that do not change the numbers a run produces: they may differ between a run and its
# resume (a preempted job may come back on another node, with another data path).
VOLATILE_KEYS = ("progress", "traceback", "resume", "checkpoint_every", "device", "data_dir", "threads",
                 "logger", "deterministic")
# Keys (dotted) added to the config after runs were checkpointed without them, with the value such
# a run ran with: a checkpoint that lacks one is compared as if it held that value.
ADDED_KEYS = {"tf32": False, "partition.tasks": "all", "partition.tasks_per_client": None,
              "partition.max_per_client": None}
# Keys a checkpoint may hold that the config no longer has: FedMGDA's ``algo.total_rounds`` was
# the run's ``rounds`` (``${rounds}``), which the runner now hands to the rule.
REMOVED_KEYS = ("algo.total_rounds",)


def run_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that determines the results of a run."""
    return {k: v for k, v in cfg.items() if k not in VOLATILE_KEYS}


def config_diff(old: dict[str, Any], new: dict[str, Any], limit: int = 3) -> str:
    """``key: old -> new`` for the first ``limit`` dotted keys that differ (empty if none)."""
    a, b = ({k: v for k, v in {**ADDED_KEYS, **flatten(c)}.items() if k not in REMOVED_KEYS}
            for c in (old, new))
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, "<unset>") != b.get(k, "<unset>")]
    other = {k[:-len(".name")] for k in keys if k.endswith(".name")}   # another component:
    keys = [k for k in keys if k.endswith(".name") or k.rpartition(".")[0] not in other]  # its name
    parts = [f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}" for k in keys[:limit]]
    if len(keys) > limit:
        parts.append(f"and {len(keys) - limit} more")
    return ", ".join(parts)


def collisions(jobs: list[tuple[int, Path, dict[str, Any]]]) -> list[tuple[int, Path, str]]:
    """The jobs ``(number, directory, resolved config)`` of a sweep whose directory holds a
    result (finished, or interrupted with its checkpoint) of another configuration, with the
    difference: ``resume=true`` would refuse each of them (``RunDir.check_same_config``)."""
    out = []
    for num, path, cfg in jobs:
        if not cfg["resume"]:
            continue                   # resume=false discards what is there
        old = read_summary(path / "summary.json")
        if old is None or old.get("status") not in ("completed", "diverged", "interrupted"):
            continue
        diff = config_diff(old.get("config") or {}, to_jsonable(run_config(cfg)))
        if diff:
            out.append((num, path, diff))
    return out
