"""Re-run two rows of a results page and check them against the page's committed CSV.

    python scripts/check_results.py docs/results/fedfv_table4_fmnist.md [more pages]
    python scripts/check_results.py docs/results/fmgda_table2.md --rows 1,3 --data-dir DIR

For each page: read its fenced ``fedmoo run`` command(s) and the ``fedmoo table ... --format csv
--out docs/results/<page>.csv`` line that wrote the committed CSV; pick rows of that CSV (the
first two unless ``--rows`` names others, 0-based); re-run each row with the page's own command,
restricted to the row by overriding its key columns (``+row/fedfv/table4=loss``), into a
scratch directory; tabulate the re-run with the page's own table arguments; and compare every
mean and std column to the precision the page prints (the table spec's ``decimals``). A row is
re-run with all the seeds of the page's command: the CSV holds means and stds over those seeds,
so a mean over fewer seeds could not be compared. Prints one line per step and per value that
differs; exits 1 if any value differs, 2 on a page it cannot read.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedmoo.report.tables import fmt_value, is_count, load_spec

log = logging.getLogger("check_results")
ROOT = Path(__file__).resolve().parents[1]
FEDMOO = [sys.executable, "-m", "fedmoo"]


class PageError(Exception):
    """A page this script cannot check (no command, no CSV line, a placeholder left)."""


def fenced_blocks(page: Path) -> list[list[list[str]]]:
    """Per fenced code block, the shell words of each ``fedmoo run`` / ``fedmoo table`` line
    (less ``fedmoo`` and an ``OMP_NUM_THREADS=1`` prefix)."""
    blocks, block = [], None
    for line in page.read_text().splitlines():
        s = line.strip()
        if s.startswith("```"):
            if block is not None:
                blocks.append(block)
            block = [] if block is None else None
            continue
        if block is not None and re.match(r"(\w+=\S+ )*fedmoo (run|table) ", s):
            words = shlex.split(s, comments=True)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words.pop(0)
            block.append(words[1:])
    return blocks


def page_commands(page: Path) -> tuple[list[list[str]], list[str], Path]:
    """(the run commands of the code block that writes the CSV, the table arguments of its
    ``--format csv --out X.csv`` line less dirs and --out, the CSV's path)."""
    for cmds in fenced_blocks(page):
        csv_lines = [c[1:] for c in cmds if c[0] == "table" and "--out" in c
                     and c[c.index("--out") + 1].endswith(".csv")]
        runs = [c[1:] for c in cmds if c[0] == "run"]
        if csv_lines and runs:
            break
    else:
        raise PageError(f"{page}: no code block with a `fedmoo run` line and a `fedmoo table ... "
                        "--format csv --out X.csv` line")
    args = csv_lines[0]
    out = Path(args[args.index("--out") + 1])
    table_args, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif a.startswith("-"):
            table_args.append(a)
        elif i and args[i - 1] in ("--spec", "--format", "--metric"):
            table_args.append(a)
    return runs, table_args, (ROOT / out if not out.is_absolute() else out)


def key_columns(header: list[str]) -> list[str]:
    """The CSV's configuration columns: those before the first ``.../mean``."""
    first = next(i for i, h in enumerate(header) if h.endswith("/mean"))
    return header[:first]


def override_for(key: str, value: str, run: list[str]) -> str:
    """The override that pins a configuration column: ``+row/...`` where the page's command or
    experiment appends that group, ``key=value`` otherwise."""
    plus = key.startswith("row/") or any(w.startswith(f"+{key}=") for w in run)
    return f"{'+' if plus else ''}{key}={value}"


def commands_for(runs: list[list[str]], row: dict[str, str], keys: list[str],
                 data_dir: str | None) -> list[list[str]]:
    """The page's run commands that produce ``row`` (those whose own overrides of the key columns
    include the row's values; e.g. one per seed group), each restricted to that row."""
    out = []
    for run in runs:
        own = {w.lstrip("+").split("=", 1)[0]: w.split("=", 1)[1].split(",")
               for w in run if "=" in w and not w.startswith("-")}
        if not all(row[k] in own.get(k, [row[k]]) for k in keys):
            continue
        pinned = {k: override_for(k, row[k], run) for k in keys}
        cmd = [w for w in run if w.lstrip("+").split("=", 1)[0] not in pinned
               and not w.startswith(("hydra.sweep.dir=", "progress="))]
        if "-m" not in cmd and "--multirun" not in cmd:
            cmd.insert(0, "-m")
        cmd += list(pinned.values()) + ["progress=false"]
        if "data_dir=DIR" in cmd:
            if not data_dir:
                raise PageError("the page's command reads data_dir=DIR: pass --data-dir")
            cmd[cmd.index("data_dir=DIR")] = f"data_dir={data_dir}"
        out.append(cmd)
    if not out:
        raise PageError(f"no run command of the page produces the row {row}")
    return out


def printed(value: str, decimals: int, count: bool) -> str:
    """How the page prints a CSV value (as `fedmoo table` does)."""
    return fmt_value(float(value) if value not in ("", None) else math.nan, decimals, count)


def decimals_of(table_args: list[str]) -> tuple[int, dict[str, int]]:
    """The spec's decimals and per-metric overrides (2 and none without a spec)."""
    if "--spec" not in table_args:
        return 2, {}
    spec = load_spec(table_args[table_args.index("--spec") + 1])
    return int(spec.get("decimals", 2)), {m["key"]: int(m["decimals"]) for m in spec["metrics"]
                                          if "decimals" in m}


def check_page(page: Path, rows: list[int] | None, data_dir: str | None, work: Path,
               dry_run: bool = False) -> int:
    """Re-run and compare; returns the number of values that differ."""
    runs, table_args, csv_path = page_commands(page)
    with open(csv_path, newline="") as f:
        committed = list(csv.DictReader(f))
    header = list(committed[0])
    keys = key_columns(header)
    picked = rows if rows is not None else list(range(min(2, len(committed))))
    dec, per_metric = decimals_of(table_args)
    bad = 0
    for n, i in enumerate(picked, 1):
        want = committed[i]
        label = " ".join(f"{k}={want[k]}" for k in keys)
        cmds = commands_for(runs, want, keys, data_dir)
        out = work / f"{page.stem}_row{i}"
        t0 = time.time()
        for c, cmd in enumerate(cmds):
            log.info("%s: row %d/%d (%s), command %d/%d: fedmoo run %s", page.name, n,
                     len(picked), label, c + 1, len(cmds), shlex.join(cmd))
            if not dry_run:
                subprocess.run(FEDMOO + ["run", *cmd, f"hydra.sweep.dir={out}/{c}"], check=True,
                               stdout=subprocess.DEVNULL, cwd=ROOT)
        if dry_run:
            continue
        got_csv = out / "table.csv"
        subprocess.run(FEDMOO + ["table", str(out), *table_args, "--out", str(got_csv)],
                       check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        with open(got_csv, newline="") as f:
            # a key column is missing when the re-run holds one configuration (nothing varies)
            got = [r for r in csv.DictReader(f) if all(r.get(k, want[k]) == want[k] for k in keys)]
        if len(got) != 1:
            log.error("%s: row %s: the re-run gave %d matching rows", page.name, label, len(got))
            bad += 1
            continue
        compared = 0
        for col in header:
            if not col.endswith(("/mean", "/std")) and col != "n_seeds":
                continue
            metric = col.rsplit("/", 1)[0]
            count = col == "n_seeds" or (metric not in per_metric
                                         and is_count(metric, {}))
            d = per_metric.get(metric, dec)
            a, b = printed(want[col], d, bool(count)), printed(got[0][col], d, bool(count))
            compared += 1
            if a != b:
                bad += 1
                log.error("%s: row %s: %s is %s on the page, %s re-run", page.name, label, col,
                          a, b)
        log.info("%s: row %s: %d values compared in %.0f s", page.name, label, compared,
                 time.time() - t0)
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pages", nargs="+", type=Path, help="docs/results/<page>.md")
    p.add_argument("--rows", help="0-based CSV rows to re-run, comma separated (default 0,1)")
    p.add_argument("--data-dir", help="replaces data_dir=DIR in the page's command")
    p.add_argument("--dry-run", action="store_true", help="print the re-run commands only")
    p.add_argument("--work", type=Path, help="scratch directory for the re-runs (default: a new "
                   "temporary one, kept)")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work = ns.work or Path(tempfile.mkdtemp(prefix="check_results_"))
    rows = [int(r) for r in ns.rows.split(",")] if ns.rows else None
    status = 0
    for page in ns.pages:
        try:
            bad = check_page(page, rows, ns.data_dir, work, ns.dry_run)
        except (PageError, OSError, subprocess.CalledProcessError) as e:
            log.error("%s: cannot check: %s", page, e)
            status = max(status, 2)
            continue
        if not ns.dry_run:
            print(f"{page}: {'OK' if not bad else f'{bad} value(s) differ'} (re-runs in {work})")
        status = max(status, 1 if bad else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
