"""``fedmoo <command>``: argparse dispatch (``run`` hands its arguments to Hydra in cli.app).

Torch is imported lazily so ``fedmoo --help`` and ``fedmoo list`` are instant.
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import sys
import traceback

from fedmoo import logs
from fedmoo.cli.groups import GROUPS, group_options, option_text
from fedmoo.errors import Parser, Refused, UserError

# OpenMP threads that wait for work sleep instead of spinning (read once, when torch loads its
# OpenMP runtime, so before any import of torch): a spinning thread takes a core from whatever
# else runs on a shared machine, a lockstep group's other thread included (docs/PERFORMANCE.md).
# Joblib's and submitit's workers inherit it. OMP_WAIT_POLICY=active in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
log = logging.getLogger(__name__)
VERBOSITY = {"-q": "error", "--quiet": "error", "-v": "debug", "--verbose": "debug"}

HELP = """usage: fedmoo [-q | -v] <command> [args]

fedmoo runs fair and robust federated learning experiments from Hydra configs.

commands:
  run [overrides] [-m]   train; any Hydra override, e.g. `fedmoo run algo=fedavg rounds=20`,
                         `fedmoo run -m seed=0,1,2` (one directory per job), `fedmoo run --cfg job`;
                         `fedmoo run --help`: the config groups, the run knobs and examples
  prepare [overrides] [-m]
                         download and cache the datasets a run or sweep needs (before fanning out)
  list [group [option]]  list what exists in each config group (algo, data, partition, model, ...);
                         with an option, its hyperparameters: `fedmoo list algo fedfv`
  describe [overrides]   dataset sizes, model parameters, per-client sizes and labels (no training);
                         --json, --model-only, --plot FILE.png
  table DIR... [--spec NAME] [--format csv|md|latex] [--out FILE] [--include-failed]
                         aggregate runs/sweeps over seeds into a paper-style table
  plot DIR... --out DIR [--metric M] [--format png|pdf|svg] [--dpi N] [--include-failed]
                         curves over rounds (mean ± std over seeds) and client-accuracy histograms
  pareto DIR... [--x M] [--y M] [--minimize-y] [--ref X Y] [--spec NAME] [--out FILE]
                         the accuracy-fairness trade-off: configurations, Pareto front, hypervolume

options (before the command):
  -q, --quiet            print errors only (no warnings or notes); FEDMOO_LOG_LEVEL=error
  -v, --verbose          also print debug lines; FEDMOO_LOG_LEVEL=debug
                         (FEDMOO_LOG_LEVEL=debug|info|warning|error sets the level too; the run's
                         <run dir>/fedmoo.log gets every message whatever the level)

Results go to outputs/runs/<date>/<time>_<algo>_<data>/ (rounds.csv, clients.csv, summary.json).
Exit status: 0 done, 1 a sweep job failed, 2 bad input, 3 training diverged, 128+N stopped by
signal N after a checkpoint (run the same command again to resume; docs/troubleshooting.md).
Run `fedmoo <command> --help` for the options of a command.
"""


def _fail(msg: str) -> int:
    from fedmoo.cli.status import USER_ERROR

    log.error("%s", msg)
    return USER_ERROR


def cmd_run(args: list[str]) -> int:
    if "-h" in args or "--help" in args:   # fedmoo's help; Hydra's is --hydra-help
        from fedmoo.cli.run_help import run_help

        print(run_help(), end="")
        return 0
    from fedmoo.cli import overrides
    from fedmoo.run.launchers import check_launcher

    args = overrides.aliases(args)
    if err := (overrides.check_overrides(args) or overrides.check_new_keys(args)
                or check_launcher(args)):
        return _fail(err)
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    from fedmoo.cli import app, hydra_run
    from fedmoo.cli.status import exit_status
    from fedmoo.errors import DivergenceError

    trace = (any(a.lstrip("+") in ("debug=traceback", "traceback=true") for a in args)
             or bool(os.environ.get("HYDRA_FULL_ERROR")))
    # Make Hydra raise its composition errors (instead of printing a block and exiting with 1)
    # so they become one line and exit status 2 here.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    planned = hydra_run.plan(args)
    sys.argv = ["fedmoo run", *hydra_run.argv(planned)]
    log.debug("Hydra arguments: %s", shlex.join(sys.argv[1:]))
    try:
        if planned.multirun is None:     # Hydra's other flags (--cfg, --info): @hydra.main
            hydra_run.check(planned)
            failed = app.main()
        else:
            failed = hydra_run.run(app.task, planned)
    except (Refused, UserError, DivergenceError) as e:  # a check's, a plugin's, a debug=true job's
        if trace:
            traceback.print_exc()
        log.error("%s", e)
        return exit_status(e)
    except (HydraException, OmegaConfBaseException, OSError, ValueError, YAMLError) as e:
        if not overrides.from_hydra(e):
            raise
        if trace:
            traceback.print_exc()
        return _fail(overrides.hydra_error_line(e, args))
    return exit_status(failed_jobs=failed or 0)


def cmd_list(args: list[str]) -> int:
    p = Parser(prog="fedmoo list", description="List config group options; "
                                "with an option, what it sets (a component's hyperparameters "
                                "with their values, defaults and help).")
    p.add_argument("group", nargs="?", choices=GROUPS, help="only this group")
    p.add_argument("option", nargs="?", help="one option of the group: what it sets")
    ns = p.parse_args(args)
    if ns.option:
        print(option_text(ns.group, ns.option))
        return 0
    for group in [ns.group] if ns.group else GROUPS:
        options = group_options(group)
        print(f"{group}:" + ("  (run one: fedmoo run -m experiment=NAME)"
                             if group == "experiment" else ""))
        if not options:
            print("  (none)")
        width = max((len(n) for n in options), default=0)
        for name, desc in options.items():
            print(f"  {name:<{width}}  {desc}".rstrip())
    return 0


def cmd_table(args: list[str]) -> int:
    from fedmoo.cli.config import compose
    from fedmoo.report import tables

    return tables.main(args, compose)    # a spec's rows are compared with their recipe


def _main_of(module: str):
    """The command whose ``main(args)`` is in ``module``, imported when the command runs."""
    return lambda args: importlib.import_module(module).main(args)


COMMANDS = {"run": cmd_run, "prepare": _main_of("fedmoo.cli.prepare"), "list": cmd_list,
            "describe": _main_of("fedmoo.cli.describe"), "table": cmd_table,
            "plot": _main_of("fedmoo.report.plots"), "pareto": _main_of("fedmoo.report.pareto")}


class Output:
    """``sys.stdout`` while a command runs. When the reader leaves (``fedmoo list | head``) or
    the disk is full (``> /dev/full``), the rest of the output goes to /dev/null and the command
    goes on: a sweep's jobs complete and are recorded whatever happens to their report. ``main``
    then says the failure in one line, unless the reader left (not an error of ours)."""

    def __init__(self, stream):
        self.stream, self.error = stream, None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

    def write(self, text: str) -> int:
        self._guard(self.stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self.stream.flush)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except OSError as e:
            self.error = self.error or e
            null = os.open(os.devnull, os.O_WRONLY)     # also for the flush at exit
            os.dup2(null, self.stream.fileno())
            os.close(null)


def main(argv: list[str] | None = None) -> int:
    _closed_streams()
    out = sys.stdout = Output(sys.stdout)
    try:
        status = _main(argv)
    finally:
        out.flush()
        sys.stdout = out.stream
    if out.error is None or isinstance(out.error, BrokenPipeError):
        return status
    failed = _fail(f"cannot write standard output ({out.error.strerror}); what was printed is "
                   "lost (the files the command wrote are not): send it elsewhere")
    return status or failed


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    while argv and argv[0] in VERBOSITY:      # the Hydra jobs (any launcher) read the variable
        os.environ[logs.ENV] = VERBOSITY[argv.pop(0)]
    try:
        logs.setup(logs.parse_level(os.environ.get(logs.ENV) or "info"))
    except ValueError as e:
        logs.setup(logging.INFO)
        return _fail(str(e))
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(HELP)
        return 0
    if argv[0] == "--version":
        from fedmoo import __version__

        print(f"fedmoo {__version__}")
        return 0
    cmd = COMMANDS.get(argv[0])
    if cmd is None:
        return _fail(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
    try:
        return cmd(argv[1:])
    except UserError as e:
        return _fail(str(e))
    except KeyboardInterrupt as e:
        from fedmoo.cli.status import exit_status

        log.warning("interrupted")
        return exit_status(e)


def _closed_streams() -> None:
    """A closed stdout or stderr (``fedmoo run ... 2>&-``, a service host; Python's
    ``sys.stderr`` is then None) becomes /dev/null: messages are dropped (a run's fedmoo.log
    keeps them), and no file the run opens takes the free descriptor, where a library's or a
    child process's output would land."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)                   # open, but not ours: left alone
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        setattr(sys, name, open(os.devnull, "w"))


def entry() -> None:
    """The ``fedmoo`` command: ``main``'s exit status, through the interpreter's normal exit
    without its slow teardown (fedmoo.cli.process_exit)."""
    from fedmoo.cli.process_exit import exit_process

    exit_process(main())


if __name__ == "__main__":
    entry()
