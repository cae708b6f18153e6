#!/usr/bin/env python
"""Wall time of whole `fedmoo run` processes, start-up and exit included: the default run
(100 rounds of Synthetic(1,1)) and a 1-round run (start to first round), each REPS times in a
fresh temporary directory, with the rounds' own time from the run's "done:" line.

    python scripts/bench_startup.py                  # 7 of each
    python scripts/bench_startup.py --reps 10 -- engine=sequential   # `fedmoo run` overrides

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
    ap.add_argument("overrides", nargs="*", help="`fedmoo run` overrides (after --)")
    args = ap.parse_args(argv)
    base = [*fedmoo_command(), "run", "progress=false", *args.overrides]
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


if __name__ == "__main__":
    raise SystemExit(main())
