#!/usr/bin/env python
"""Wall time of whole `fedmoo run` processes, start-up and exit included: the default run
(100 rounds of Synthetic(1,1)) and a 1-round run (start to first round), each REPS times in a
fresh temporary directory, with the rounds' own time from the run's "done:" line.

    python scripts/bench_startup.py                  # 7 of each
    python scripts/bench_startup.py --reps 10 -- engine=sequential   # `fedmoo run` overrides
    python scripts/bench_startup.py --loggers none,tensorboard,mlflow,wandb --reps 3

``--loggers`` times the default run once per logger instead, the loggers taking turns within
each repetition (so a change in the machine's load reaches them all alike), and prints each
logger's medians and their overheads against ``logger=none`` (the first one named): the whole
process, the run as it reports itself (``done: ... in X s``: set-up and rounds) and the median
round (rounds.csv's ``time/round_s``). MLflow writes its default store (``<run dir>/mlflow.db``, a new
SQLite database each time), W&B runs offline (WANDB_MODE=offline).

The numbers of docs/PERFORMANCE.md ("engine=auto on a CPU, and start-up"); the issue's target is
the default run under 5 s on the project's 2-core CPU VM. Runs the `fedmoo` next to this Python
(the installed console script), as a user would; the load average is printed with each line.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def fedmoo_command() -> list[str]:
    script = Path(sys.executable).with_name("fedmoo")
    if script.exists():
        return [str(script)]
    found = shutil.which("fedmoo")
    if found is None:
        raise SystemExit("bench_startup: no `fedmoo` command; pip install -e . first")
    return [found]


def one(cmd: list[str], cwd: str) -> tuple[float, float | None]:
    """Wall seconds of the process, and the rounds' seconds it reports."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench_startup: {' '.join(cmd)} failed:\n{done.stderr}")
    m = re.search(r"done: \d+ rounds in ([0-9.]+) s", done.stdout)
    return wall, float(m.group(1)) if m else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--loggers", default=None, metavar="A,B,...",
                    help="time the default run with each of these loggers (the first is the "
                         "baseline), e.g. none,tensorboard,mlflow,wandb")
    ap.add_argument("overrides", nargs="*", help="`fedmoo run` overrides (after --)")
    args = ap.parse_args(argv)
    base = [*fedmoo_command(), "run", "progress=false", *args.overrides]
    if args.loggers:
        return loggers(base, args.loggers.split(","), args.reps)
    for label, extra in (("default run (100 rounds)", []), ("start to first round (rounds=1)",
                                                            ["rounds=1"])):
        walls, rounds = [], []
        for _ in range(args.reps):
            with tempfile.TemporaryDirectory() as cwd:
                wall, r = one(base + extra, cwd)
            walls.append(wall)
            rounds.append(r)
        inner = [r for r in rounds if r is not None]
        print(f"{label}: wall median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
              f"max {max(walls):.2f}; {' '.join(f'{w:.2f}' for w in walls)})"
              + (f"; rounds median {statistics.median(inner):.1f} s" if inner else "")
              + f"; load {os.getloadavg()[0]:.2f}", flush=True)
    return 0


def round_median(cwd: str) -> float | None:
    """The median ``time/round_s`` of the run's rounds.csv under ``cwd`` (None if none)."""
    import csv

    for path in Path(cwd).rglob("rounds.csv"):
        with open(path, newline="") as f:
            times = [float(r["time/round_s"]) for r in csv.DictReader(f) if r.get("time/round_s")]
        return statistics.median(times) if times else None
    return None


def loggers(base: list[str], names: list[str], reps: int) -> int:
    """The default run with each logger, taking turns; medians and overheads against the first."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    walls: dict[str, list[float]] = {n: [] for n in names}
    rounds: dict[str, list[float]] = {n: [] for n in names}
    per_round: dict[str, list[float]] = {n: [] for n in names}
    print(f"default run, {reps} repetition(s) per logger; load {os.getloadavg()[0]:.2f}",
          flush=True)
    for rep in range(reps):
        for name in names:
            with tempfile.TemporaryDirectory() as cwd:
                wall, r = one(base + [f"logger={name}"], cwd)
                each = round_median(cwd)
            walls[name].append(wall)
            if r is not None:
                rounds[name].append(r)
            if each is not None:
                per_round[name].append(each)
            print(f"  rep {rep + 1} logger={name}: wall {wall:.2f} s, run {r} s, median round "
                  f"{each} s; load {os.getloadavg()[0]:.2f}", flush=True)
    ref_w, ref_r = statistics.median(walls[names[0]]), statistics.median(rounds[names[0]])
    ref_e = statistics.median(per_round[names[0]]) if per_round[names[0]] else None
    for name in names:
        w, r = statistics.median(walls[name]), statistics.median(rounds[name])
        e = statistics.median(per_round[name]) if per_round[name] else None
        print(f"logger={name}: wall median {w:.2f} s ({100 * (w / ref_w - 1):+.0f}% against "
              f"logger={names[0]}), run median {r:.2f} s ({100 * (r / ref_r - 1):+.0f}%)"
              + (f", round median {1000 * e:.1f} ms ({100 * (e / ref_e - 1):+.0f}%)"
                 if e is not None and ref_e else ""), flush=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
