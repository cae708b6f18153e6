"""Result files of a run: rounds.csv (appended and flushed per row), clients.csv, summary.json.

Rewritten files go to a temporary file first and are renamed, so a killed run never leaves a
half-written file. ``read_rounds_frame`` reads a rounds.csv that may be damaged for the reports.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
from pathlib import Path
from typing import IO, Any, Callable, Iterable


def atomic_write(path: Path, write: Callable[[IO], None], mode: str = "w") -> None:
    """``write(f)`` into a temporary file beside ``path``, fsync, then rename over ``path``: a
    reader sees the old file or the new one; on failure (a full disk) ``path`` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text))


def save_figure(fig, path: str | Path, **kwargs: Any) -> None:
    """``fig.savefig(path, **kwargs)`` through ``atomic_write``: a full disk leaves no partial
    figure, and an older file of that name stays as it was."""
    fmt = Path(path).suffix[1:].lower()
    atomic_write(Path(path), lambda f: fig.savefig(f, format=fmt, **kwargs), mode="wb")


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return v


def csv_text(columns: list[str], rows: Iterable[dict[str, Any]]) -> str:
    """``rows`` as CSV text under the header ``columns`` (a key a row lacks: empty)."""
    if not columns:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, restval="")
    w.writeheader()
    w.writerows({k: _fmt(v) for k, v in r.items()} for r in rows)
    return buf.getvalue()


class RoundsWriter:
    """Append one row per evaluated round; the header is the union of keys seen so far (a key
    that appears after the first row, rare, rewrites the file once with the wider header)."""

    def __init__(self, path: Path, rows: Iterable[dict[str, Any]] = ()):
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = list(rows)
        self.columns = list(dict.fromkeys(k for r in self.rows for k in r))
        atomic_write_text(self.path, csv_text(self.columns, self.rows))

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        new = [k for k in row if k not in self.columns]
        self.columns += new
        if new:
            atomic_write_text(self.path, csv_text(self.columns, self.rows))
            return
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.columns, restval="").writerow(
                {k: _fmt(v) for k, v in row.items()})


def one_line(e: BaseException) -> str:
    """An error's message on one line of at most 200 characters."""
    return " ".join(str(e).split())[:200]


def to_jsonable(v: Any) -> Any:
    """``v`` as it reads back from JSON: tuples become lists, NaN and inf become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_jsonable(x) for x in v]
    return v


def write_json(path: Path, obj: dict[str, Any]) -> None:
    atomic_write_text(Path(path), json.dumps(to_jsonable(obj), indent=2) + "\n")


def read_summary(path: Path) -> dict[str, Any] | None:
    """A run's summary.json, or None if it is missing or unreadable (it is written atomically,
    so unreadable means someone edited it)."""
    try:
        with open(path) as f:
            out = json.load(f)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) else None


# fedmoo's sweeper notes a sweep here, in its folder (fedmoo.run.sweeps)
SWEEP_NOTE = Path(".fedmoo") / "sweep.json"


def sweep_info(sweep_dir: Path) -> dict[str, Any] | None:
    """The sweep's note (``jobs``, ``start``, ``swept``), if fedmoo's sweeper wrote one."""
    note = read_summary(Path(sweep_dir) / SWEEP_NOTE)   # any JSON mapping, or None
    return note if note is not None and isinstance(note.get("jobs"), int) else None


def read_rounds_frame(path: Path, expected_rows: int | None = None):
    """(frame, problem, note): rounds.csv's whole rows as a DataFrame, what is wrong with the file
    (a cut last line or rows of another width, left out; fewer rows than ``expected_rows``; an
    unreadable file: empty frame) and what ``last_of_each_round`` repaired; None if nothing."""
    import pandas as pd

    problems = []
    try:
        lines = Path(path).read_text().splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines.pop()
            problems.append("its last line is cut mid-row")
        frame = pd.DataFrame()
        if lines:
            width = len(next(csv.reader(lines[:1])))
            whole = [ln for ln in lines[1:] if len(next(csv.reader([ln]), [])) == width]
            bad = len(lines) - 1 - len(whole)
            if bad:
                problems.append(f"{bad} row{' has' if bad == 1 else 's have'} another number of "
                                "fields than the header")
            frame = pd.read_csv(io.StringIO("".join(lines[:1] + whole)))
    except (OSError, ValueError, csv.Error, RecursionError) as e:  # pandas' errors: ValueError
        return pd.DataFrame(), f"unreadable: {one_line(e)}", None
    frame, note = last_of_each_round(frame)
    if expected_rows is not None and len(frame) < expected_rows:
        problems.append(f"{len(frame)} rows where summary.json implies {expected_rows}")
    return frame, "; ".join(problems) or None, note


def last_of_each_round(frame):
    """(frame, note): ``frame`` with one row per ``round`` (the last written) in round order, and
    which rounds were written more than once (None when every round appears once, in order)."""
    if "round" not in frame.columns or frame.empty:
        return frame, None
    rounds = frame["round"]
    repeated = sorted(set(rounds[rounds.duplicated()].tolist()))
    if not repeated and rounds.is_monotonic_increasing:
        return frame, None
    kept = frame.drop_duplicates("round", keep="last").sort_values("round", kind="stable")
    shown = ", ".join(str(r) for r in repeated[:5]) + (", ..." if len(repeated) > 5 else "")
    what = (f"round{'s' if len(repeated) > 1 else ''} {shown} written more than once"
            if repeated else "rounds out of order")
    return kept.reset_index(drop=True), (f"{what} ({len(frame)} rows for {len(kept)} rounds): "
                                         "using the last row of each round")


class ClientsRoundsWriter:
    """``clients_rounds.csv``: per-client metrics every ``log_clients_every`` rounds; on resume,
    the rows of rounds after the checkpoint (written before a crash) are dropped first."""

    COLUMNS = ["round", "client", "test_accuracy", "test_loss", "train_loss"]

    def __init__(self, path: Path, keep_up_to_round: int):
        self.path = Path(path)
        rows = []
        if self.path.exists() and keep_up_to_round > 0:
            with open(self.path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["round"]) <= keep_up_to_round]
        atomic_write_text(self.path, csv_text(self.COLUMNS, rows))

    def log(self, round_done: int, test_acc, test_loss, train_loss) -> None:
        """One row per client; on multi-task data (``[N, S]`` arrays) the means over the tasks,
        as clients.csv's ``accuracy`` / ``loss``."""
        with open(self.path, "a", newline="") as f:
            w = csv.writer(f)
            for k in range(len(test_acc)):
                w.writerow([round_done, k, *(_fmt(statistics.fmean(v[k].reshape(-1).tolist()))
                                             for v in (test_acc, test_loss, train_loss))])
