"""Errors a user can cause. The CLI prints them as one line and exits with status 2."""


class UserError(Exception):
    """A mistake in the configuration, the command line or the data on disk.

    The message must name the key or path, the value, what is allowed and how to fix it.
    """


class DivergenceError(Exception):
    """Training produced a non-finite loss or an exploding update; the run stops with status 3."""
