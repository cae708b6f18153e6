"""fedmoo's C kernels (``conv_pool.c``), compiled once per machine with the system's C compiler
(``-march=native``, cached per source, compiler and CPU) and loaded with ctypes: plain C compiles
in a second where torch's C++ extensions take a minute, and ctypes releases the GIL. A library is
written by a rename with its SHA-256 digest beside it and checked before loading (a truncated
copy would end the process with SIGBUS inside ``dlopen``). ``FEDMOO_NATIVE=0``, no compiler or a
failed build: one warning, and torch's operators run. docs/PERFORMANCE.md ("MultiLeNet's blocks
as one C kernel").
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from fedmoo.data.cache import user_cache_dir

SOURCE = Path(__file__).with_name("conv_pool.c")
FLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp-simd", "-std=c11", "-shared",
         "-fPIC"]
# C function -> (pointer arguments, size arguments, result), see conv_pool.c
SIGNATURES = {"conv1_pool_relu": (5, 5, None), "pool_relu": (3, 4, None),
              "conv_pool_relu_backward": (8, 8, ctypes.c_int)}
log = logging.getLogger(__name__)


def _cpu() -> str:
    """The CPU's model name and feature flags (Linux), else the machine type."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    keep = [ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
    return "\n".join(sorted(set(keep))) or platform.machine()


def _key(compiler: list[str]) -> str:
    blob = "\0".join([SOURCE.read_text(), *compiler, *FLAGS, _cpu(), platform.platform()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(target: Path) -> bool:
    """The library exists and matches the digest recorded when it was built."""
    record = target.with_name(target.name + ".sha256")
    try:
        return record.read_text().strip() == _digest(target)
    except OSError:
        return False


def _ensure(compiler: list[str], target: Path) -> None:
    """Build ``target`` unless a verified copy is there (a damaged one is rebuilt)."""
    if _verified(target):
        return
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / "build.lock"), timeout=600):
        if _verified(target):                     # another process built it meanwhile
            return
        if target.exists():
            log.warning("fedmoo's cached CPU kernels in %s are damaged or unverified; "
                        "rebuilding them", target)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
        os.close(fd)
        try:
            subprocess.run([*compiler, *FLAGS, "-o", tmp, str(SOURCE)], check=True,
                           capture_output=True, text=True, timeout=300)
            digest = _digest(Path(tmp))
            os.replace(tmp, target)
            Path(tmp).write_text(digest + "\n")     # the digest goes in last, also by a rename
            os.replace(tmp, target.with_name(target.name + ".sha256"))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels, built on first use; None when turned off or not buildable."""
    if os.environ.get("FEDMOO_NATIVE", "1") == "0":
        return None
    compiler = shlex.split(os.environ.get("CC") or "cc")     # CC may carry arguments
    if not compiler or shutil.which(compiler[0]) is None:
        log.warning("no C compiler (CC=%s): fedmoo's CPU kernels are off, torch's operators "
                    "run instead (slower for MultiLeNet)", os.environ.get("CC") or "cc")
        return None
    root = user_cache_dir() or Path(tempfile.gettempdir()) / "fedmoo"
    target = root / "native" / _key(compiler) / "conv_pool.so"
    try:
        _ensure(compiler, target)
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError, TimeoutError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        log.warning("fedmoo's CPU kernels could not be built (%s); torch's operators run "
                    "instead", detail.strip().splitlines()[-1] if detail.strip() else e)
        return None
    for name, (pointers, sizes, result) in SIGNATURES.items():
        for suffix in ("_f32", "_f64"):
            fn = getattr(lib, name + suffix)
            fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_long] * sizes
            fn.restype = result
    return lib
