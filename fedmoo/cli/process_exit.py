"""How the ``fedmoo`` process ends: the interpreter's normal exit, without the slow teardown.

Once torch is loaded, ending the process took 0.6-0.8 s on the project's idle 2-core VM (1.5-2 s
when busy), in two parts, both after everything Python promises at exit has happened:

- the garbage collector's passes over every object alive while the interpreter finalizes its
  modules: ``gc.freeze()`` puts the objects alive now out of its reach (exit handlers, the flush
  of stdout/stderr, the wait for non-daemon threads and reference-counting finalizers still run;
  objects kept alive only by a cycle are not finalized, which Python never promises at exit);
- the C library's teardown, the shared libraries' destructors (libtorch, CUDA): on glibc,
  ``on_exit(_exit)``, registered last so it runs first among the C exit handlers, ends the
  process with the interpreter's exit status right then (the C stdio buffers are flushed
  before). Elsewhere the C teardown runs as usual (slower, same result).

``python scripts/exit_cost.py`` measures the variants (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import gc
import sys


def exit_process(code: int) -> None:
    """End the process with status ``code`` through ``sys.exit``, without the slow teardown."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        on_exit, quick_exit = libc.on_exit, libc._exit
    except (OSError, AttributeError):   # no ``on_exit``: the C teardown runs as usual
        pass
    else:
        on_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        libc.fflush(None)                # the C stdio buffers: ``_exit`` skips their flush
        on_exit(ctypes.cast(quick_exit, ctypes.c_void_p), None)
    gc.freeze()
    sys.exit(code)
