"""A full disk: one clear error, the last checkpoint and rows intact, no temporary files, and a
re-run after freeing space continues."""

from __future__ import annotations

import errno
import os

import pytest

from fedmoo.errors import UserError
from fedmoo.report import results
from fedmoo.report.results import RoundsWriter, atomic_write_text
from fedmoo.run.loop import run
from tests.conftest import small_cfg
from tests.reliability.helpers import rows_without_time


def no_space(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    path.write_text("old")
    monkeypatch.setattr(results.os, "fsync", no_space)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_run_on_a_full_disk_stops_cleanly_and_resumes(tmp_path, monkeypatch):
    cfg = small_cfg(rounds=4, checkpoint_every=1, resume=True)
    reference = run(cfg, tmp_path / "ref")
    real_log = RoundsWriter.log

    def log(self, row):
        if row["round"] == 3:
            no_space()
        real_log(self, row)

    monkeypatch.setattr(RoundsWriter, "log", log)
    with pytest.raises(UserError, match=r"^no space left on the device of .+ while writing it; "
                                        r"free some space and run the same command again"):
        run(cfg, tmp_path / "full")
    full = tmp_path / "full"
    assert [r["round"] for r in rows_without_time(full / "rounds.csv")] == ["1", "2"]
    assert (full / "checkpoint.pt").exists()
    assert not [p for p in full.rglob("*") if p.name.endswith(".tmp")]
    monkeypatch.setattr(RoundsWriter, "log", real_log)
    again = run(cfg, full)
    assert again.resumed_from == 2
    assert rows_without_time(full / "rounds.csv") == rows_without_time(reference.run_dir / "rounds.csv")
    assert os.path.exists(full / "summary.json")
