"""Errors a user can cause. The CLI prints them as one line and exits with status 2."""

import argparse


class UserError(Exception):
    """A mistake in the configuration, the command line or the data on disk.

    The message must name the key or path, the value, what is allowed and how to fix it.
    """


class DivergenceError(Exception):
    """Training produced a non-finite loss or an exploding update; the run stops with status 3."""


class RunInterrupted(Exception):
    """SIGTERM or SIGINT stopped the run after a checkpoint; it exits with status 128 + signal."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class Refused(BaseException):
    """A UserError found by a check that Hydra calls (a callback, the sweeper), carried out of
    Hydra to the CLI, which prints its one line and exits with status 2. A BaseException, not an
    Exception: Hydra turns a callback's Exception into a warning and goes on to make the run
    directory."""


class Parser(argparse.ArgumentParser):
    """argparse's parser for fedmoo's commands: a mistake is one line and status 2, without
    argparse's usage block above it (``--help`` shows the usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
