"""fedmoo's own messages: the ``fedmoo`` logger, one line per message on stderr.

Modules log with ``logging.getLogger(__name__)``. The CLI calls :func:`setup`; in a Hydra job
``conf/hydra/job_logging/fedmoo.yaml`` gives the logger the same stderr handler
(:func:`stderr_handler`) plus Hydra's file handler (``<run dir>/fedmoo.log``, every level). The
logger does not propagate, so Hydra's console never repeats a line; from Python nothing is set
up. A line reads ``fedmoo: error: ...``, ``fedmoo: debug: ...`` or ``fedmoo: ...``
(``extra={"prefix": ...}`` replaces the prefix); ``FEDMOO_LOG_LEVEL`` (debug | info | warning |
error; ``fedmoo -v`` / ``-q``) is the least severe level printed on stderr.
"""

from __future__ import annotations

import logging
import os
import sys

ENV = "FEDMOO_LOG_LEVEL"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
_WORDS = {logging.DEBUG: "debug: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}


def parse_level(text: str) -> int:
    """The level named ``text`` (case-insensitive); ValueError with the one-line fix if none."""
    level = LEVELS.get(text.strip().lower())
    if level is None:
        raise ValueError(f"{ENV}={text!r} is not a log level; use one of: {', '.join(LEVELS)} "
                         "(or fedmoo -q / fedmoo -v)")
    return level


def env_level() -> int:
    """``FEDMOO_LOG_LEVEL``'s level: info when unset or invalid (the CLI refuses the latter)."""
    try:
        return parse_level(os.environ.get(ENV) or "info")
    except ValueError:
        return logging.INFO


class Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = getattr(record, "prefix", None)
        if prefix is None:
            prefix = "fedmoo: " + _WORDS.get(record.levelno, "")
        return prefix + super().format(record)


class StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each message (redirections, pytest's capture)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        logging.Handler.__init__(self, level)
        self.setFormatter(Formatter())

    @property
    def stream(self):  # noqa: D102 - StreamHandler's attribute, looked up at each message
        return sys.stderr


class RunLog(logging.FileHandler):
    """A run's ``fedmoo.log``. A line it cannot write (a full disk) is left out of it without
    logging's "--- Logging error ---" traceback on stderr, which gets the line itself anyway."""

    def handleError(self, record: logging.LogRecord) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handleError(record)


def stderr_handler() -> StderrHandler:
    """The stderr handler at ``FEDMOO_LOG_LEVEL`` (the factory the Hydra job config names)."""
    return StderrHandler(env_level())


def hydra_handler() -> logging.Handler:
    """Hydra's own lines on stdout (its launch lines are notes: info), not below
    ``FEDMOO_LOG_LEVEL``, so ``fedmoo -q`` hides them (``conf/hydra/hydra_logging/fedmoo.yaml``)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setLevel(max(logging.INFO, env_level()))
    return handler


def setup(level: int | None = None) -> None:
    """fedmoo's messages go to stderr only, at ``level`` (default: ``FEDMOO_LOG_LEVEL``); this
    replaces the logger's handlers, a finished Hydra job's run log included."""
    log = logging.getLogger("fedmoo")
    log.handlers = [StderrHandler(env_level() if level is None else level)]
    log.setLevel(logging.DEBUG)
    log.propagate = False


# What a logging configuration (Hydra's hydra.job_logging / hydra.hydra_logging, given to
# logging.config.dictConfig) may name: dictConfig imports and calls whatever a ``class`` or
# ``()`` key names and imports the module of an ``ext://`` value, before any run starts.
# fedmoo's own factories and handler class, by exact name: a prefix would also pass
# ``fedmoo.logs.os.remove`` (dictConfig follows every dot)
OURS = ("fedmoo.logs.stderr_handler", "fedmoo.logs.hydra_handler", "fedmoo.logs.RunLog")
STREAMS = ("ext://sys.stdout", "ext://sys.stderr")
_BASES = {"handlers": logging.Handler, "formatters": logging.Formatter, "filters": logging.Filter}


# The logging package's handlers that send lines to another host (a config would send the run's
# log, and the secrets an ${oc.env:...} puts in it, wherever it names)
NETWORK = ("SocketHandler", "DatagramHandler", "SysLogHandler", "HTTPHandler", "SMTPHandler")


def _logging_class(path: str, base: type) -> bool:
    """``path`` names a subclass of ``base`` defined by the logging package itself, not one that
    sends to another host."""
    import logging.handlers

    module, _, name = path.rpartition(".")
    owner = {"logging": logging, "logging.handlers": logging.handlers}.get(module)
    found = getattr(owner, name, None) if owner is not None else None
    return isinstance(found, type) and issubclass(found, base) and name not in NETWORK


RUN_DIR = "${hydra.runtime.output_dir}/"


def _in_run_dir(filename: str) -> bool:
    """``filename`` names a ``*.log`` file in the run's folder (``RUN_DIR`` then a name, which
    may be ``${hydra.job.name}``)."""
    name = filename.removeprefix(RUN_DIR).replace("${hydra.job.name}", "job")
    return filename.startswith(RUN_DIR) and name.endswith(".log") and not any(
        c in name for c in "/\\${}")


def check_config(config: dict | None, where: str) -> str | None:
    """Why the dictConfig mapping ``config`` (plain dicts and lists) is refused, or None: a
    ``class`` that is not one of the logging package's own handlers / formatters / filters (or
    fedmoo.logs'), a ``()`` factory that is not fedmoo's, an ``ext://`` other than sys.stdout /
    sys.stderr, a handler's file not a ``*.log`` in the run's folder (it could empty a result
    file, or any file through an absolute path or a symlink elsewhere)."""
    def walk(node, key: str, section: str | None) -> str | None:
        if isinstance(node, str):
            return f"{key}={node}" if node.startswith("ext://") and node not in STREAMS else None
        items = node.items() if isinstance(node, dict) else \
            enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            sub = f"{key}.{k}"
            ours = isinstance(v, str) and v in OURS
            if k == "class" and not (ours or isinstance(v, str) and _logging_class(
                    v, _BASES.get(section or "", object))):
                return f"{sub}={v}"
            if k == "()" and not ours:
                return f"{sub}={v}"
            if k == "filename" and section == "handlers" and not _in_run_dir(str(v)):
                return f"{sub}={v}"       # (mode w on rounds.csv would empty a result)
            bad = walk(v, sub, k if node is config else section)
            if bad:
                return bad
        return None

    bad = walk(config, where, None)
    if bad is None:
        return None
    return (f"{bad} is refused: a logging configuration may name only the logging module's own "
            "handlers, formatters and filters (logging.FileHandler, logging.StreamHandler, "
            f"logging.handlers.RotatingFileHandler, ...), {', '.join(OURS)}, "
            f"{' or '.join(STREAMS)} and files {RUN_DIR}NAME.log (docs/troubleshooting.md)")
