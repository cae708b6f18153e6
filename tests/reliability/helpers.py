"""Shared checks of the reliability tests."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

SMALL = ["num_clients=6", "clients_per_round=3", "data.max_samples=100", "progress=false"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # tiny models: one thread beats several on a busy machine


def rows_without_time(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if not k.startswith("time/")}
                for r in csv.DictReader(f)]


def summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def assert_no_result(root: Path) -> None:
    """Nothing under ``root`` pretends to be a result: no completed summary, no rounds rows."""
    for s in Path(root).rglob("summary.json"):
        assert json.loads(s.read_text())["status"] != "completed", s
    for r in Path(root).rglob("rounds.csv"):
        assert rows_without_time(r) == [], r
    assert not list(Path(root).rglob("model.pt"))


def wait_rows(path: Path, n: int, proc, timeout: float = 120) -> None:
    """Wait until the CSV at ``path`` has more than ``n`` lines while ``proc`` (a Popen) runs."""
    end = time.time() + timeout
    while time.time() < end:
        if path.exists() and len(path.read_text().splitlines()) > n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {n} rows")
