"""Re-run rows of the results pages and check them against the pages' committed CSVs.

    python scripts/check_results.py --data-dir DIR                # every page of docs/results
    python scripts/check_results.py --quick --data-dir DIR        # the first row of every CSV
    python scripts/check_results.py docs/results/fmgda_table2.md --rows 1,3 --data-dir DIR

A page's CSVs are those its fenced ``fedmoo table DIRS ... --format csv --out docs/results/X.csv``
lines write. For each such line: the run commands it tabulates are the page's fenced ``fedmoo run``
lines whose sweep directory (``hydra.sweep.dir=``, else the experiment's own) is one of the line's
DIRS or lies under one; pick rows of the CSV (the first two, the first with ``--quick``, or
``--rows``, 0-based); re-run each row with those commands, restricted to the row by overriding its
key columns (``+row/fedfv/table4=loss``), into a scratch directory; tabulate the re-run with the
line's own table arguments; and compare every mean and std column to the precision the page
prints (the table spec's ``decimals``). A row is re-run with all the seeds of the page's commands:
the CSV holds means and stds over those seeds, so a mean over fewer seeds could not be compared.

Prints one line per step and per value that differs, and per page its result and time. With no
page argument it checks every page of docs/results and also that every CSV there is written by
one of them. Exits 1 if any value differs, 2 if a page (or a CSV) cannot be checked.
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

import yaml

from fedmoo.report.tables import fmt_value, is_count, load_spec

log = logging.getLogger("check_results")
ROOT = Path(__file__).resolve().parents[1]
FEDMOO = [sys.executable, "-m", "fedmoo"]


class PageError(Exception):
    """A page this script cannot check (no command, no CSV line, a placeholder left)."""


def fenced_commands(page: Path) -> list[list[str]]:
    """The shell words of each ``fedmoo run`` / ``fedmoo table`` line of the page's fenced code
    blocks (less ``fedmoo`` and an ``OMP_NUM_THREADS=1`` prefix), in page order."""
    cmds, fenced = [], False
    for line in page.read_text().splitlines():
        s = line.strip()
        if s.startswith("```"):
            fenced = not fenced
        elif fenced and re.match(r"(\w+=\S+ )*fedmoo (run|table) ", s):
            words = shlex.split(s, comments=True)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words.pop(0)
            cmds.append(words[1:])
    return cmds


TABLE_OPTIONS = {"--spec", "--format", "--out", "--metric"}    # `fedmoo table` options with a value


def split_table(args: list[str]) -> tuple[list[str], list[str], str | None]:
    """(the DIRS of a ``fedmoo table`` line, its other arguments less ``--out``, its --out)."""
    dirs, rest, out, i = [], [], None, 0
    while i < len(args):
        a = args[i]
        if a in TABLE_OPTIONS and i + 1 < len(args):
            if a == "--out":
                out = args[i + 1]
            else:
                rest += [a, args[i + 1]]
            i += 2
            continue
        (rest if a.startswith("-") else dirs).append(a)
        i += 1
    return dirs, rest, out


def sweep_dir(run: list[str]) -> Path:
    """Where a ``fedmoo run -m`` line writes: its ``hydra.sweep.dir=``, else its experiment's."""
    for w in run:
        if w.startswith("hydra.sweep.dir="):
            return Path(w.split("=", 1)[1])
    exp = next((w.split("=", 1)[1] for w in run if w.lstrip("+").startswith("experiment=")), None)
    conf = ROOT / "fedmoo" / "conf" / "experiment" / f"{exp}.yaml"
    if exp and conf.exists():
        d = (yaml.safe_load(conf.read_text()) or {}).get("hydra", {}).get("sweep", {}).get("dir")
        if d:
            return Path(d)
    raise PageError(f"cannot tell where `fedmoo run {shlex.join(run)}` writes (no "
                    "hydra.sweep.dir= and no experiment with one)")


def reads(table_dir: str, run_dir: Path) -> bool:
    """Whether `fedmoo table TABLE_DIR` reads the runs of a sweep written to RUN_DIR."""
    t = Path(table_dir).parts
    return run_dir.parts[:len(t)] == t


def page_csvs(page: Path) -> list[tuple[Path, list[list[str]], list[str]]]:
    """Per CSV a fenced ``fedmoo table ... --format csv --out X.csv`` line of the page writes: (its
    path, the page's run commands whose sweeps that line reads, the line's table arguments less
    DIRS and --out)."""
    cmds = fenced_commands(page)
    runs = [c[1:] for c in cmds if c and c[0] == "run"]
    out = []
    for c in cmds:
        if not c or c[0] != "table":
            continue
        dirs, table_args, dest = split_table(c[1:])
        if not dest or not dest.endswith(".csv"):
            continue
        mine = [r for r in runs if any(reads(d, sweep_dir(r)) for d in dirs)]
        if not mine:
            raise PageError(f"{page}: no `fedmoo run` line of the page writes what "
                            f"`fedmoo table {shlex.join(c[1:])}` reads")
        path = Path(dest)
        out.append((path if path.is_absolute() else ROOT / path, mine, table_args))
    if not out:
        raise PageError(f"{page}: no `fedmoo table ... --format csv --out X.csv` line")
    return out


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


def check_csv(page: Path, csv_path: Path, runs: list[list[str]], table_args: list[str],
              rows: list[int], data_dir: str | None, work: Path, dry_run: bool) -> tuple[int, int]:
    """Re-run rows of one CSV of the page and compare; (values that differ, rows re-run)."""
    with open(csv_path, newline="") as f:
        committed = list(csv.DictReader(f))
    if not committed:
        raise PageError(f"{csv_path} has no rows")
    header = list(committed[0])
    keys = key_columns(header)
    picked = [i for i in rows if i < len(committed)]
    dec, per_metric = decimals_of(table_args)
    bad = 0
    for n, i in enumerate(picked, 1):
        want = committed[i]
        label = f"{csv_path.name} row {i} (" + " ".join(f"{k}={want[k]}" for k in keys) + ")"
        cmds = commands_for(runs, want, keys, data_dir)
        out = work / f"{csv_path.stem}_row{i}"
        t0 = time.time()
        for c, cmd in enumerate(cmds):
            log.info("%s: %s, command %d/%d: fedmoo run %s", page.name, label, c + 1, len(cmds),
                     shlex.join(cmd))
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
            log.error("%s: %s: the re-run gave %d matching rows", page.name, label, len(got))
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
                log.error("%s: %s: %s is %s on the page, %s re-run", page.name, label, col, a, b)
        log.info("%s: %s: %d values compared in %.0f s", page.name, label, compared,
                 time.time() - t0)
    return bad, len(picked)


def check_page(page: Path, rows: list[int], data_dir: str | None, work: Path,
               dry_run: bool = False) -> tuple[int, int, int]:
    """Re-run and compare every CSV of the page; (values that differ, CSVs, rows re-run)."""
    csvs = page_csvs(page)
    for csv_path, runs, _ in csvs:           # every row's commands, before the first re-run
        with open(csv_path, newline="") as f:
            committed = list(csv.DictReader(f))
        for i in rows:
            if i < len(committed):
                commands_for(runs, committed[i], key_columns(list(committed[0])), data_dir)
    bad = n_rows = 0
    for csv_path, runs, table_args in csvs:
        b, n = check_csv(page, csv_path, runs, table_args, rows, data_dir, work / page.stem,
                         dry_run)
        bad, n_rows = bad + b, n_rows + n
    return bad, len(csvs), n_rows


def unwritten_csvs(pages: list[Path], results: Path) -> list[Path]:
    """The CSVs of RESULTS that no fenced `fedmoo table ... --out` line of PAGES writes."""
    written = set()
    for page in pages:
        for c in fenced_commands(page):
            if c and c[0] == "table" and split_table(c[1:])[2]:
                out = Path(split_table(c[1:])[2])
                written.add((out if out.is_absolute() else ROOT / out).resolve())
    return [p for p in sorted(results.glob("*.csv")) if p.resolve() not in written]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pages", nargs="*", type=Path,
                   help="docs/results/<page>.md (default: every page of docs/results)")
    p.add_argument("--quick", action="store_true", help="re-run the first row of each CSV only")
    p.add_argument("--rows", help="0-based rows of each CSV to re-run, comma separated "
                   "(default 0,1; 0 with --quick)")
    p.add_argument("--data-dir", help="replaces data_dir=DIR in the pages' commands")
    p.add_argument("--dry-run", action="store_true", help="print the re-run commands only")
    p.add_argument("--work", type=Path, help="scratch directory for the re-runs (default: a new "
                   "temporary one, kept)")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work = ns.work or Path(tempfile.mkdtemp(prefix="check_results_"))
    rows = ([int(r) for r in ns.rows.split(",")] if ns.rows else [0] if ns.quick else [0, 1])
    results = ROOT / "docs" / "results"
    pages = ns.pages or sorted(results.glob("*.md"))
    status = 0
    if not ns.pages:
        for orphan in unwritten_csvs(pages, results):
            print(f"{orphan.relative_to(ROOT)}: no page's `fedmoo table ... --out` line writes it")
            status = 2
    for page in pages:
        t0, name = time.time(), os.path.relpath(page)
        try:
            bad, n_csv, n_rows = check_page(page, rows, ns.data_dir, work, ns.dry_run)
        except (PageError, OSError, ValueError, KeyError, StopIteration,
                subprocess.CalledProcessError) as e:
            print(f"{name}: cannot check: {e} ({time.time() - t0:.0f} s)")
            status = max(status, 2)
            continue
        if not ns.dry_run:
            result = "OK" if not bad else f"{bad} value(s) differ"
            print(f"{name}: {result}, {n_rows} row(s) of {n_csv} CSV(s) re-run in "
                  f"{time.time() - t0:.0f} s (re-runs in {work / page.stem})", flush=True)
        status = max(status, 1 if bad else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
