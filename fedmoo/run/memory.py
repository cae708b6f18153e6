"""Will the model fit? A lower bound of a run's memory, checked before the big allocations.

A round needs at least the model, its gradients and the global model (3 d, d counted on the
``meta`` device), the cohort's [K, d] updates, the algorithm's kept vectors and a batch's
activations (one sample's, counted on a probe forward). Only that lower bound is refused, so
there are no false alarms.
"""

from __future__ import annotations

from typing import Any

import torch

from fedmoo import budget, models
from fedmoo.errors import UserError


def parameter_count(cfg: dict[str, Any], federation) -> int | None:
    """Parameters of the configured model, without allocating them (None if it cannot tell)."""
    try:
        with torch.device("meta"):
            model = models.build(cfg["model"], tuple(federation.input_shape),
                                 federation.num_classes, federation.num_tasks)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - the estimate is a guard, never a new failure
        return None


def activations_per_sample(model: torch.nn.Module, x1: torch.Tensor) -> int:
    """Numbers the leaf modules output for the one-sample batch ``x1`` (no gradients kept)."""
    total = 0

    def count(_module, _inputs, out):
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(x1)
    finally:
        for h in hooks:
            h.remove()
    return total


def available(device: torch.device) -> int | None:
    """Bytes fedmoo may still allocate on ``device`` (None if unknown; ``fedmoo.budget``)."""
    return budget.available(device)


def kept(algo, num_clients: int) -> int:
    """Model-sized vectors ``algo``'s state keeps besides w, for ``num_clients`` clients."""
    per_client, total = algo.kept_vectors
    return per_client * num_clients + total


def lower_bound(d: int, per_round: int, acts: int = 0, batch: int = 1, kept: int = 0) -> int:
    """Bytes: 3 d + K d parameters-sized tensors, the algorithm's ``kept`` model-sized vectors
    and a batch's activations with gradients."""
    return torch.get_default_dtype().itemsize * (d * (3 + per_round + kept) + 2 * acts * batch)


def check_fits(cfg: dict[str, Any], d: int | None, per_round: int, device: torch.device,
               acts: int = 0, kept: int = 0) -> None:
    free = available(device)
    if d is None or free is None:
        return
    batch = int(cfg["client"]["batch_size"] or 1)   # null = full batch
    need = lower_bound(d, per_round, acts, batch, kept)
    if need <= free:
        return
    what = f"{d:.3g} parameters" + (f" and {acts:,} activations per sample x batch {batch}"
                                    if acts else "")
    state = f" and the {kept:,} model-sized vectors algo={cfg['algo']['name']} keeps" if kept else ""
    need_s, free_s = budget.sizes(need, free)
    raise UserError(
        f"model={cfg['model'].get('name')} does not fit: {what} need at least {need_s} for a "
        f"round of {per_round} clients{state}, but {device.type} has {free_s} free; choose a "
        f"smaller model, fewer clients_per_round{' or num_clients,' if kept else ''} or a "
        "smaller client.batch_size")
