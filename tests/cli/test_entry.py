"""The ``fedmoo`` command's exit (fedmoo.cli.main.entry): the status of ``main``, the exit
handlers run and stdout flushed, but no interpreter teardown; a running non-daemon thread
still gets the usual exit, which waits for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_status_exit_handlers_and_flush(tmp_path):
    done = _python(["-c",
        "import atexit, sys\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "print('buffered', end='')\n"                  # not flushed by a newline
        "sys.argv = ['fedmoo', 'nosuch']\n"
        "from fedmoo.cli import entry\n"
        "entry()\n"], tmp_path)
    assert done.returncode == 2
    assert done.stdout == "bufferedhandler ran\n"
    assert done.stderr.startswith("fedmoo: error: unknown command 'nosuch'")


def test_a_running_thread_gets_the_usual_exit(tmp_path):
    done = _python(["-c",
        "import sys, threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread done'))).start()\n"
        "sys.argv = ['fedmoo', '--version']\n"
        "from fedmoo.cli import entry\n"
        "entry()\n"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "thread done"


def test_python_m_fedmoo(tmp_path):
    done = _python(["-m", "fedmoo", "--version"], tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("fedmoo ")
