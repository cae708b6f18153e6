"""fedmoo's messages through `logging` (fedmoo/logs.py): the same one line per message on stderr,
fedmoo -q / -v / FEDMOO_LOG_LEVEL, and every message in Hydra's <run dir>/fedmoo.log."""

from __future__ import annotations

import logging

import pytest

from fedmoo import logs
from fedmoo.run.setup import resolve_device
from fedmoo.cli.main import HELP, main
from tests.inprocess import cli_in
from tests.reliability.helpers import SMALL
from tests.report.test_tables import _job

NOTE = ("fedmoo pareto: not included: {}: diverged\n"
        "fedmoo pareto: left out 1 of 1 jobs (1 diverged): only completed jobs with intact files "
        "count")


def _line(level: int, msg: str, **extra) -> str:
    record = logging.LogRecord("fedmoo.x", level, __file__, 1, msg, None, None)
    record.__dict__.update(extra)
    return logs.Formatter().format(record)


def test_line_format():
    assert _line(logging.ERROR, "bad") == "fedmoo: error: bad"
    assert _line(logging.WARNING, "note") == "fedmoo: note"
    assert _line(logging.INFO, "note") == "fedmoo: note"
    assert _line(logging.DEBUG, "detail") == "fedmoo: debug: detail"
    assert _line(logging.ERROR, "x", prefix="fedmoo plot: ") == "fedmoo plot: x"


@pytest.fixture
def level_env(monkeypatch):
    monkeypatch.setenv(logs.ENV, "info")  # main() sets the variable; monkeypatch removes it after


def test_stderr_text_and_quiet(tmp_path, capsys, level_env):
    _job(tmp_path, "0", ["algo=fedavg"], 0, {"test/acc_mean": 80.0, "test/acc_worst10": 0.0},
         status="diverged")
    error = (f"fedmoo: error: no configuration below {tmp_path} has completed runs that report "
             "test/acc_mean and test/acc_worst10 (see `fedmoo table` for the metrics)")
    note = NOTE.format(tmp_path / "0")
    assert main(["pareto", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"{note}\n{error}\n"
    assert main(["-q", "pareto", str(tmp_path)]) == 2      # the warning goes, the error stays
    assert capsys.readouterr().err == f"{error}\n"
    assert main(["--verbose", "pareto", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"{note}\n{error}\n"


def test_a_run_log_a_full_disk_refuses_prints_no_traceback(tmp_path, capsys):
    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            pass

    handler = logs.RunLog(tmp_path / "fedmoo.log")
    handler.stream.close()
    handler.stream = Full()
    record = logging.LogRecord("fedmoo.x", logging.ERROR, __file__, 1, "lost", None, None)
    handler.emit(record)                       # was "--- Logging error ---" and a traceback
    assert capsys.readouterr().err == ""
    record = logging.LogRecord("fedmoo.x", logging.ERROR, __file__, 1, "%d", ("x",), None)
    handler.emit(record)                       # a bug of the message itself is still shown
    assert "--- Logging error ---" in capsys.readouterr().err


def test_the_level_variable(monkeypatch, capsys, level_env):
    monkeypatch.setenv(logs.ENV, "WARNING")
    assert logs.stderr_handler().level == logging.WARNING     # what a Hydra job's handler gets
    monkeypatch.setenv(logs.ENV, "loud")
    assert logs.stderr_handler().level == logging.INFO
    assert main(["list", "algo"]) == 2
    assert capsys.readouterr().err == ("fedmoo: error: FEDMOO_LOG_LEVEL='loud' is not a log level; "
                                       "use one of: debug, info, warning, error (or fedmoo -q / "
                                       "fedmoo -v)\n")
    assert "-q, --quiet" in HELP and "-v, --verbose" in HELP


@pytest.mark.slow
def test_a_sweep_logs_each_line_once_and_into_each_jobs_log(tmp_path):
    cli = cli_in(tmp_path)   # in-process (tests.inprocess): Hydra's handlers write to its stdout
    # krum with 3 clients per round: refused by the rule once its job knows the cohort (a bad
    # value alone refuses the whole sweep before it starts)
    r = cli("-v", "run", "-m", *SMALL, "rounds=1", "algo=fedavg,krum", "hydra.sweep.dir=sw")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == len(set(lines)), r.stderr                 # nothing printed twice
    assert "fedmoo: sweep sw: 2 jobs: 1 completed, 1 failed" in lines
    parts = [x for x in lines if x.startswith(f"fedmoo: debug: run parts: device {resolve_device('auto')}, engine ")]
    assert len(parts) == 1 and any(x.startswith("fedmoo: debug: Hydra arguments: ") for x in lines)
    assert "fedmoo:" not in r.stdout and "][fedmoo" not in r.stdout  # no copy by Hydra's console
    log0 = (cli.cwd / "sw" / "0" / "fedmoo.log").read_text()
    assert log0.count("[fedmoo.run.setup][DEBUG] - " + parts[0][len("fedmoo: debug: "):]) == 1
    assert "sweep sw" not in (cli.cwd / "sw" / "1" / "fedmoo.log").read_text()


def test_quiet_sweep_hides_hydras_launch_lines_and_keeps_the_count(tmp_path):
    cli = cli_in(tmp_path)
    r = cli("-q", "run", "-m", *SMALL, "rounds=2", "client.lr=1e6,0.1", "hydra.sweep.dir=sw")
    assert r.returncode == 0, r.stderr                                # diverged is a result
    assert "Launching" not in r.stdout + r.stderr and "#0 :" not in r.stdout, r.stdout
    assert "fedmoo: sweep sw: 2 jobs: 1 completed, 1 diverged" in r.stderr.splitlines()
    loud = cli("run", "-m", *SMALL, "rounds=1", "seed=0,1", "hydra.sweep.dir=sw2")
    assert "[HYDRA] Launching 2 jobs locally" in loud.stdout
