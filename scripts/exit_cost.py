#!/usr/bin/env python
"""The cost of ending a Python process that has imported torch, for each way of ending it: from
the child's last statement to the parent seeing it exit (wall seconds), the variants taking
turns in each repetition so a change in the machine's load reaches them all alike.

    python scripts/exit_cost.py --reps 5

Variants: ``sys.exit`` (the interpreter's normal exit), ``gc.freeze()`` before it, fedmoo's
``exit_process`` (fedmoo/cli/process_exit.py: gc.freeze and, on glibc, the process ended once
the interpreter has finished), and ``os._exit`` after a flush (no teardown at all, the floor).
The load average is printed with each line (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "sys.exit": "sys.exit(0)",
    "gc.freeze + sys.exit": "import gc; gc.freeze(); sys.exit(0)",
    "fedmoo exit_process": "from fedmoo.cli.process_exit import exit_process; exit_process(0)",
    "os._exit (floor)": "sys.stdout.flush(); os._exit(0)",
}


def one(code: str) -> float:
    src = ("import os, sys, time, torch\n"
           "print(time.clock_gettime(time.CLOCK_MONOTONIC), flush=True)\n" + code + "\n")
    p = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    if p.wait() != 0:
        raise SystemExit(f"exit_cost: {code!r} exited with {p.returncode}")
    return time.clock_gettime(time.CLOCK_MONOTONIC) - float(out.split()[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for _ in range(args.reps):
        for name, code in VARIANTS.items():
            times[name].append(one(code))
    for name, t in times.items():
        print(f"{name:22s} median {statistics.median(t):.3f} s (min {min(t):.3f}, max "
              f"{max(t):.3f}; {' '.join(f'{x:.3f}' for x in t)})")
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
