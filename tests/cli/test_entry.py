"""The ``fedmoo`` command's exit (fedmoo.cli.main.entry, fedmoo.cli.process_exit): the status
of ``main`` through the interpreter's normal exit: the exit handlers run, stdout is flushed, a
running non-daemon thread is waited for."""

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


def test_exit_process_keeps_the_status_and_what_python_runs_at_exit(tmp_path):
    """exit_process (fedmoo.cli.process_exit): the status reaches the shell, the exit handlers
    and a non-daemon thread run, the finalizer of an object freed on the way out runs, and what
    C code printed is flushed."""
    done = _python(["-c",
        "import atexit, os, sys, threading, time\n"
        "class Closer:\n"
        "    def __del__(self, write=os.write):\n"
        "        write(1, b'closed\\n')\n"
        "atexit.register(lambda: print('handler ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
        "from fedmoo.cli.process_exit import exit_process\n"
        "import ctypes\n"
        "ctypes.CDLL(None).printf(b'c stdio\\n')\n"     # buffered in the C library (a pipe)
        "def end(closer):\n"
        "    exit_process(3)\n"
        "end(Closer())\n"], tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["c stdio", "closed", "thread done", "handler ran"]
