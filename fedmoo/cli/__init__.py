"""The commands: ``fedmoo run|prepare|list|describe|table|plot`` (see ``main``); ``entry`` is the
console script."""

from fedmoo.cli.main import entry, main

__all__ = ["entry", "main"]
