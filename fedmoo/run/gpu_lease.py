"""Spread parallel local jobs over the GPUs: each job leases a free GPU through a lock file.

With ``device=auto`` and more than one visible GPU, a job takes the lock ``gpu<i>.lock`` (it
dies with its process) and trains on ``cuda:<i>``; otherwise nothing happens. GPUs are counted
without CUDA, so a sweep's parent process never creates a CUDA context.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from itertools import takewhile
from pathlib import Path

from fedmoo.errors import UserError
from fedmoo.run.locks import HeldLock, try_lock

log = logging.getLogger(__name__)

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
POLL_S = 0.5


def visible_gpu_count(environ: dict[str, str] | None = None, proc_dir: Path = PROC_GPUS) -> int:
    """GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else the NVIDIA driver's
    ``/proc/driver/nvidia/gpus`` entries."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return len(list(takewhile(lambda v: not v.startswith("-"), ids)))  # CUDA stops there
    try:
        return sum(1 for _ in proc_dir.iterdir())
    except OSError:
        return 0


def register_resolvers() -> None:
    """``${fedmoo.gpus:}`` in configs (hydra/launcher/local_gpus.yaml uses it for n_jobs): jobs
    to run at once on this machine, one per visible GPU (one on a CPU-only machine)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("fedmoo.gpus"):
        OmegaConf.register_new_resolver("fedmoo.gpus", lambda: max(1, visible_gpu_count()))


def try_acquire(lock_dir: Path, num_gpus: int) -> tuple[int, HeldLock] | None:
    """Lease the first free GPU index; returns (index, lock) or None when all are busy."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    return next(((i, lock) for i in range(num_gpus)
                 if (lock := try_lock(lock_dir / f"gpu{i}.lock")) is not None), None)


@contextlib.contextmanager
def lease_device(device: str, num_gpus: int | None = None, lock_dir: Path | None = None,
                 timeout_s: float | None = None) -> Iterator[str]:
    """Yield the device a job should use, holding a GPU lease for the block: ``device`` itself
    unless it is ``auto`` with several GPUs, else ``cuda:<i>`` once one is free. ``timeout_s``
    (default: ``FEDMOO_GPU_LEASE_TIMEOUT``, else none) bounds the wait."""
    count = visible_gpu_count() if num_gpus is None else num_gpus
    if str(device) != "auto" or count <= 1:
        yield str(device)
        return
    if lock_dir is None:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        lock_dir = os.environ.get("FEDMOO_GPU_LOCK_DIR") or (
            Path(tempfile.gettempdir()) / f"fedmoo-gpu-locks-{uid}")
    lock_dir = Path(lock_dir)
    if timeout_s is None and os.environ.get("FEDMOO_GPU_LEASE_TIMEOUT"):
        timeout_s = float(os.environ["FEDMOO_GPU_LEASE_TIMEOUT"])
    start, announced = time.monotonic(), False
    while (got := try_acquire(lock_dir, count)) is None:
        if timeout_s is not None and time.monotonic() - start >= timeout_s:
            raise UserError(
                f"device=auto: all {count} GPUs stayed leased for {timeout_s:g} s (locks in "
                f"{lock_dir}); run fewer parallel jobs (hydra.launcher.n_jobs) or pin device=cuda:N"
            )
        if not announced:
            log.info("all %d GPUs are leased; waiting for one (locks in %s)", count, lock_dir)
            announced = True
        time.sleep(POLL_S)
    index, lock = got
    log.debug("device=auto: leased cuda:%d of %d GPUs (lock in %s)", index, count, lock_dir)
    with lock:
        yield f"cuda:{index}"
