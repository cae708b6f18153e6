"""``fedmoo prepare [overrides] [-m]``: download and cache the datasets of a run or a sweep.

Run it once before ``fedmoo run -m ...`` fans jobs out, so parallel jobs (local processes, Slurm
array tasks, Ray workers) find the files in ``data_dir`` instead of all downloading them at
once. With ``-m`` the overrides are expanded like Hydra's basic sweeper does (comma lists,
``range()``, ``choice()``, ``glob()`` and the config's ``hydra.sweeper.params``); every distinct
(data config, data_dir) pair is loaded once.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from fedmoo.cli.config import compose
from fedmoo.errors import Parser, UserError

log = logging.getLogger(__name__)


def _parse(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise UserError(f"invalid override: {str(e).splitlines()[0]}") from None


def expand(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job ``fedmoo run [-m] OVERRIDES`` would launch, without the
    ``hydra.*`` and ``hydra/...`` ones (they cannot change a job's data)."""
    from hydra.errors import HydraException

    from fedmoo.cli.overrides import grid

    parsed = [o for o in _parse(overrides) if not o.key_or_group.startswith(("hydra.", "hydra/"))]
    sweeps = [o for o in parsed if o.is_sweep_override()]
    if not multirun:
        if sweeps:
            raise UserError(f"{sweeps[0].input_line} is a sweep; add -m to prepare every job")
        return [[o.input_line for o in parsed]]
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    swept = compose(fixed, resolve=False, hydra=True)["hydra"]["sweeper"].get("params") or {}
    all_params = _parse([f"{k}={v}" for k, v in swept.items()] + [o.input_line for o in parsed])
    try:
        return grid(all_params)
    except HydraException as e:
        raise UserError(f"cannot expand the sweep: {str(e).splitlines()[0]}") from None


def datasets(jobs: list[list[str]]) -> list[tuple[dict[str, Any], str]]:
    """Distinct (data config, data_dir) pairs of the jobs, in first-seen order."""
    seen: dict[str, tuple[dict[str, Any], str]] = {}
    for job in jobs:
        cfg = compose(job)
        key = json.dumps([cfg["data"], str(cfg["data_dir"])], sort_keys=True, default=str)
        seen.setdefault(key, (cfg["data"], str(cfg["data_dir"])))
    return list(seen.values())


def _where(location: str | None, data_dir: str) -> str:
    """Where the loader really read the data: data_dir, or a folder outside it (Debian's
    Fashion-MNIST) said as such, or no folder at all (generated data)."""
    if not location:
        return data_dir
    try:
        inside = Path(location).resolve().is_relative_to(Path(data_dir).resolve())
    except (OSError, ValueError):
        inside = False
    if inside or not Path(location).is_absolute():
        return location
    return f"{location} (not in data_dir {data_dir})"


def main(args: list[str]) -> int:
    p = Parser(
        prog="fedmoo prepare", usage="fedmoo prepare [overrides] [-m]",
        description="Download and cache the datasets that `fedmoo run [-m] OVERRIDES` needs "
                    "(run it once before a parallel sweep).")
    p.add_argument("-m", "--multirun", action="store_true", help="expand sweep overrides")
    p.add_argument("overrides", nargs="*", help="the same overrides as `fedmoo run`")
    ns = p.parse_args(args)

    from fedmoo.cli.overrides import aliases, check_new_keys, check_overrides

    overrides = aliases(ns.overrides)
    if err := check_overrides(overrides) or check_new_keys(overrides):
        raise UserError(err)
    jobs = expand(overrides, ns.multirun)
    pairs = datasets(jobs)

    from fedmoo.data import load_source

    missing = 0
    for data_cfg, data_dir in pairs:
        t0 = time.perf_counter()
        try:
            src = load_source(data_cfg, data_dir)
        except UserError as e:     # said, and the others are still prepared
            missing += 1
            log.error("%s", e)
            continue
        n_test = int(src.is_test.sum())
        print(f"ready: data={data_cfg['name']} in {_where(src.location, data_dir)}: "
              f"{len(src.y) - n_test} train + {n_test} test samples, input "
              f"{list(src.input_shape)} ({time.perf_counter() - t0:.1f} s)")
    if missing:
        raise UserError(f"{missing} of {len(pairs)} dataset(s) could not be prepared (above)")
    print(f"prepared {len(pairs)} dataset(s) for {len(jobs)} job(s)")
    return 0
