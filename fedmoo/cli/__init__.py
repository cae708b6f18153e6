"""The commands: ``fedmoo run|prepare|list|describe|table|plot`` (see ``main``)."""

from fedmoo.cli.main import main

__all__ = ["main"]
