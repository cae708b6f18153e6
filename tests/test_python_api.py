"""The Python API: docs/python.md's example runs as written; run/load behave like the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedmoo.api as fm
from fedmoo.errors import UserError
from tests.inprocess import cli_in

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"
SMALL = ["rounds=2", "num_clients=6", "clients_per_round=3", "data.max_samples=100",
         "progress=false"]


def test_the_documented_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks
    exec(compile(blocks[0], str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert out.count(" completed ") == 6 and "fedfv" in out and "test/acc_worst10" in out


def test_run_writes_what_the_cli_writes_and_load_reads_it(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess)
    a = fm.run(SMALL, run_dir=tmp_path / "py")
    assert a.status == "completed" and (tmp_path / "py" / ".hydra" / "overrides.yaml").exists()
    assert cli("run", *SMALL, "seed=1", f"hydra.run.dir={tmp_path / 'cli'}").returncode == 0
    frame = fm.load(tmp_path)
    assert list(frame.columns[:3]) == ["job", "status", "seed"]
    assert sorted(frame["seed"].unique()) == [0, 1]
    assert len(frame) == 4 and set(frame["round"]) == {1, 2}
    again = fm.run(SMALL, run_dir=tmp_path / "py")          # already done: skipped
    assert again.skipped and again.final["test/acc_mean"] == a.final["test/acc_mean"]
    table = cli("table", str(tmp_path))
    assert table.returncode == 0 and "| 2 |" in table.stdout      # one configuration, 2 seeds


def test_mistakes_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="unknown algo 'nope'"):
        fm.run(["algo=nope"], run_dir=tmp_path)
    with pytest.raises(UserError, match="no such directory"):
        fm.load(tmp_path / "absent")


def test_load_keeps_every_column_groupable_and_typed(tmp_path):
    from tests.report.test_tables import _job

    rows = [{"round": 1, "test/acc_mean": 50.0}, {"round": 2, "test/acc_mean": 60.0}]
    _job(tmp_path, "0", ["model.hidden=[50]"], 0, {}, rounds=rows)
    _job(tmp_path, "1", ["model.hidden=[100,100]"], 0, {}, rounds=rows)
    _job(tmp_path, "2", ["model.hidden=[100,100]"], 1, {}, status="failed")
    frame = fm.load(tmp_path)
    assert str(frame["round"].dtype) == "Int64" and str(frame["seed"].dtype) == "Int64"
    assert frame["round"].isna().sum() == 1
    assert frame.groupby("model.hidden").size().to_dict() == {"[50]": 2, "[100, 100]": 3}
    assert len(frame.drop_duplicates()) == 5
