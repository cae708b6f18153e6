"""Will the model fit? A lower bound of a run's memory, checked before anything is allocated.

The model is built on PyTorch's ``meta`` device (shapes only, no storage) to count its
parameters d and, with one forward pass of a ``client.batch_size`` batch, the activations of a
local step. A round needs at least: the model, its gradients and the global model (3 d), the
cohort's K update rows (K d) — fedmoo keeps them as one [K, d] tensor — and the activations of
one batch (forward values and their gradients). Refusing only when even this lower bound does
not fit avoids false alarms; a model that passes can still run out of memory later.
"""

from __future__ import annotations

from typing import Any

import torch

from fedmoo import models
from fedmoo.errors import UserError


def lower_bound(cfg: dict[str, Any], federation, per_round: int) -> tuple[int, int] | None:
    """(bytes, parameters) of the lower bound, or None when the model cannot be built on meta."""
    try:
        with torch.device("meta"):
            model = models.build(cfg["model"], tuple(federation.input_shape),
                                 federation.num_classes, federation.num_tasks)
            d = sum(p.numel() for p in model.parameters())
            batch = int(cfg["client"].get("batch_size") or 1)
            acts = _activations(model, (batch, *federation.input_shape), federation.x.dtype)
    except Exception:  # noqa: BLE001 - the estimate is a guard, never a new failure
        return None
    itemsize = torch.get_default_dtype().itemsize
    return itemsize * (d * (3 + per_round) + 2 * acts), d


def _activations(model: torch.nn.Module, shape: tuple[int, ...], dtype: torch.dtype) -> int:
    total = 0

    def count(_module, _inputs, out):
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel()

    leaves = [m for m in model.modules() if not list(m.children())]
    hooks = [m.register_forward_hook(count) for m in leaves]
    try:
        x = torch.zeros(shape, dtype=dtype if not dtype.is_floating_point else None, device="meta")
        model(x)
    finally:
        for h in hooks:
            h.remove()
    return total


def available(device: torch.device) -> int | None:
    """Free memory of ``device`` in bytes (None if unknown)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(cfg: dict[str, Any], federation, per_round: int, device: torch.device) -> None:
    est, free = lower_bound(cfg, federation, per_round), available(device)
    if est is None or free is None or est[0] <= free:
        return
    need, d = est
    raise UserError(
        f"model={cfg['model'].get('name')} does not fit: {d:.3g} parameters need at least "
        f"{need / 2**30:.1f} GiB for a round of {per_round} clients, but {device.type} has "
        f"{free / 2**30:.1f} GiB free; choose a smaller model or fewer clients_per_round")
