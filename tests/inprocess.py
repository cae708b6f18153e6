"""``fedmoo ARGS`` in the test process: ``fedmoo.cli.main.main`` with its own cwd, environment,
stdout and stderr, everything it changes undone afterwards.

A subprocess costs a fresh interpreter and a torch import (3 to 4 s of CPU each); the test
workers have torch loaded already. Tests about the process itself (signals, a lock held by
another process, the exit status the shell sees) keep ``tests.conftest.run_cli``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path


@contextlib.contextmanager
def isolated(cwd: Path, env: dict | None = None):
    """Run Hydra / the CLI in this process: cwd, environment, argv, logging and torch threads are
    restored on exit (Hydra's job logging reconfigures the root logger; ``cmd_run`` sets
    HYDRA_FULL_ERROR and sys.argv)."""
    import torch
    from hydra.core.global_hydra import GlobalHydra

    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv[:], os.getcwd()
    loggers = [logging.getLogger(), logging.getLogger("fedmoo")]
    saved_logs = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    threads = torch.get_num_threads()
    os.environ.setdefault("FEDMOO_DATA", str(Path(cwd) / "data"))
    os.environ.update(env or {})
    os.environ.pop("HYDRA_FULL_ERROR", None)
    torch.set_num_threads(1)             # tiny models, like OMP_NUM_THREADS=1 in run_cli
    GlobalHydra.instance().clear()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        GlobalHydra.instance().clear()
        torch.set_num_threads(threads)
        for lg, handlers, level, propagate in saved_logs:
            for h in lg.handlers:
                if h not in handlers:
                    h.close()
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate
        sys.argv[:] = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)


def run_main(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``fedmoo ARGS`` run in-process in ``cwd``: returncode, stdout and stderr as run_cli's."""
    from fedmoo.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with isolated(cwd, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:          # argparse's --help / usage errors
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
            if isinstance(e.code, str):
                err.write(e.code + "\n")
    return subprocess.CompletedProcess(["fedmoo", *args], code, out.getvalue(), err.getvalue())


def cli_in(cwd: Path):
    """A stand-in for conftest's ``cli`` fixture that runs in-process: ``cli("run", ...)``."""
    def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return run_main(list(args), cwd, env)

    _run.cwd = Path(cwd)
    return _run


def fresh_joblib_workers() -> None:
    """Stop joblib's reusable worker processes: a sweep run in-process would otherwise reuse
    workers started by an earlier test, with that test's working directory and environment."""
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)
