"""Flat parameter vectors <-> module parameters.

The global model travels as ONE flat float vector ``[d]`` of the trainable parameters in
``named_parameters()`` order. Buffers (e.g. BatchNorm running statistics) are kept apart: they
never enter norms, dot products or QPs, and are averaged uniformly over a cohort.
"""

from __future__ import annotations

import torch
from torch import nn


def num_params(module: nn.Module) -> int:
    """Number of trainable scalar parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def get_flat(module: nn.Module) -> torch.Tensor:
    """Concatenate the trainable parameters into a new flat vector ``[d]``."""
    return torch.cat([p.detach().reshape(-1) for p in module.parameters() if p.requires_grad])


def set_flat(module: nn.Module, flat: torch.Tensor) -> None:
    """Copy a flat vector ``[d]`` into the trainable parameters, in place."""
    offset = 0
    with torch.no_grad():
        for p in module.parameters():
            if not p.requires_grad:
                continue
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} entries, model has {offset} parameters")


def get_flat_grad(module: nn.Module) -> torch.Tensor:
    """Concatenate the gradients of the trainable parameters (zeros where absent)."""
    parts = []
    for p in module.parameters():
        if not p.requires_grad:
            continue
        parts.append(torch.zeros_like(p).reshape(-1) if p.grad is None else p.grad.reshape(-1))
    return torch.cat(parts)


def get_buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    """Float buffers (running statistics); integer buffers such as counters are skipped."""
    return {k: b.detach().clone() for k, b in module.named_buffers() if b.is_floating_point()}


def set_buffers(module: nn.Module, buffers: dict[str, torch.Tensor]) -> None:
    own = dict(module.named_buffers())
    with torch.no_grad():
        for k, v in buffers.items():
            own[k].copy_(v)
