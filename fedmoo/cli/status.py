"""The exit status of a ``fedmoo`` command: what an outcome means to the shell, decided here only.

====  ==========================================================================================
0     done, or already done (a re-run of a completed run); a sweep whose jobs all completed or
      diverged (a diverged job is a result: ``fedmoo table`` shows it)
1     a sweep job failed or left no result (``fedmoo run -m``; the jobs' summary.json on disk)
2     a user error: a bad override, value or input file (``fedmoo.errors.UserError``, ``Refused``)
3     the run diverged (``fedmoo.errors.DivergenceError``)
128+N stopped by signal N after a checkpoint (``fedmoo.errors.RunInterrupted``; Ctrl-C: 130);
      the same command again resumes
====  ==========================================================================================
"""

from __future__ import annotations

import signal

from fedmoo.errors import DivergenceError, Refused, RunInterrupted, UserError

DONE, SWEEP_FAILED, USER_ERROR, DIVERGED = 0, 1, 2, 3


def exit_status(outcome: BaseException | None = None, failed_jobs: int = 0) -> int:
    """The status for ``outcome`` (the exception that ended the command, or None when it ran to
    its end) and, for a sweep, the number of its jobs that failed or left no result. Another
    exception is a bug: it is not mapped (the caller shows its traceback, Python exits with 1)."""
    if isinstance(outcome, RunInterrupted):
        return 128 + int(outcome.signum)
    if isinstance(outcome, KeyboardInterrupt):
        return 128 + int(signal.SIGINT)
    if isinstance(outcome, (UserError, Refused)):
        return USER_ERROR
    if isinstance(outcome, DivergenceError):
        return DIVERGED
    if outcome is not None:
        raise ValueError(f"no exit status for {type(outcome).__name__}: {outcome}")
    return SWEEP_FAILED if failed_jobs > 0 else DONE
