"""Flat parameter vectors <-> module parameters: the global model travels as ONE flat vector
``[d]`` of the trainable parameters in ``named_parameters()`` order (buffers are not part of it,
never aggregated; the batched engine refuses models with running statistics)."""

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
