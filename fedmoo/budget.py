"""How much memory fedmoo may allocate, and the check every big allocation makes first.

A config can ask for more memory than the machine has; Linux then lets the allocation succeed
and kills the process minutes later without a message. So code making such an allocation
estimates its bytes first and calls :func:`check`, which refuses in one line. The CPU limit is
the least of ``MemAvailable`` (/proc/meminfo), what the process's cgroup still allows (v2
``memory.max`` or v1 ``memory.limit_in_bytes``, minus usage) and ``FEDMOO_MEMORY_LIMIT`` (bytes,
or a number with K, M, G or T); on a GPU it is the device's free memory. An unknown limit checks
nothing. This module imports nothing of fedmoo but errors: every layer may ask it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fedmoo.errors import UserError

ENV = "FEDMOO_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def size(n: float) -> str:
    """Bytes for a message, to three figures: ``26.4 GiB``, ``284 MiB``, ``1.35 MiB``, ``100 bytes``."""
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= unit:
            v = n / unit
            return f"{v:.{2 if v < 10 else 1 if v < 100 else 0}f} {name}"
    return f"{int(n)} bytes"


def sizes(need: int, free: int) -> tuple[str, str]:
    """``size`` of both, in bytes when three figures cannot tell them apart."""
    shown = size(need), size(free)
    return shown if shown[0] != shown[1] else (f"{need:,} bytes", f"{free:,} bytes")


def env_limit() -> int | None:
    """``FEDMOO_MEMORY_LIMIT`` in bytes (None when unset); a malformed value is a UserError."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text, re.I)
    if m is None or float(m.group(1)) <= 0:
        raise UserError(f"{ENV}={text!r} is not a memory size; use bytes or a number with K, M, "
                        f"G or T (e.g. {ENV}=8G), or unset it")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room() -> int | None:
    """What this process's memory cgroup still allows (None: no limit or unknown)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":                                  # v2: one unified hierarchy
            root, names = Path("/sys/fs/cgroup"), ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):               # v1
            root = Path("/sys/fs/cgroup/memory")
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        # the group's own folder, or the mount itself inside a container's cgroup namespace
        base = next((b for b in (root / rel.lstrip("/"), root) if (b / names[0]).is_file()), root)
        limit, used = _read_int(base / names[0]), _read_int(base / names[1])
        if limit is not None and limit < 2**60:                # "max" / a huge v1 number: none
            return max(limit - (used or 0), 0)
    return None


def _mem_available() -> int | None:
    try:
        m = re.search(r"^MemAvailable:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M)
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def available(device=None) -> int | None:
    """Bytes fedmoo may still allocate on ``device`` (a torch.device; None = the CPU)."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    known = [n for n in (_mem_available(), _cgroup_room(), env_limit()) if n is not None]
    return min(known) if known else None


def check(need: int, what: str, fix: str, device=None) -> None:
    """Refuse (UserError) when ``need`` bytes do not fit in what ``device`` has available:
    ``<what> needs about N GiB, more than the M GiB of memory available; <fix>``."""
    free = available(device)
    if free is None or need <= free:
        return
    where = "" if device is None or getattr(device, "type", "cpu") == "cpu" else f" on {device}"
    limit = f" ({ENV})" if free == env_limit() else ""
    need_s, free_s = sizes(need, free)
    raise UserError(f"{what} needs about {need_s}, more than the {free_s} of memory "
                    f"available{where}{limit}; {fix}")
