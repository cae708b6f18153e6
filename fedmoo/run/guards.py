"""Divergence checks of a run, after every update (its knobs are checked before any work starts
by ``fedmoo.config.schema.check``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedmoo.errors import DivergenceError


def check_diverged(w, losses, round_done: int,
                   cfg: dict[str, Any], updates: torch.Tensor | None = None) -> None:
    """Raise DivergenceError if a model, the clients' losses or their ``updates`` are not
    finite, or a model's norm (in float64) exceeds ``diverge_norm``. ``w``: the global model, or
    ``{name: model}`` (``reported_models``; a ``[N, d]`` model is one model per client)."""
    limit = cfg["diverge_norm"]
    models = {"the global model": w} if isinstance(w, torch.Tensor) else w
    norms = {}
    for name, m in models.items():   # a model per client [N, d]: the largest norm
        n = torch.linalg.vector_norm(m, dim=-1, dtype=torch.float64)
        norms[name] = float(n.max()) if n.numel() else 0.0
    losses = [] if losses is None else [losses] if isinstance(losses, torch.Tensor) else losses
    bad = [name for name, n in norms.items() if not np.isfinite(n)]
    big = [name for name, n in norms.items() if limit is not None and n > float(limit)]
    if bad:
        what = f"{bad[0]} is not finite"
    elif not all(bool(torch.isfinite(v).all()) for v in losses if v is not None):
        what = "the clients' training loss is not finite"
    elif updates is not None and not bool(torch.isfinite(updates).all()):
        what = "a client's update is not finite (it overflowed in local training)"
    elif big:
        what = f"{big[0]}'s norm {norms[big[0]]:.3g} exceeds diverge_norm={float(limit):g}"
    else:
        return
    raise _diverged(round_done, what, cfg)


def _diverged(round_done: int, what: str, cfg: dict[str, Any]) -> DivergenceError:
    return DivergenceError(f"training diverged in round {round_done}: {what}; lower client.lr "
                           f"(now {cfg['client']['lr']}) or the server step size, or check the "
                           "algo.* and attack settings")


def reported_models(algo, state) -> dict[str, torch.Tensor]:
    """Every model whose numbers a run reports: the global model, the model(s) it evaluates
    (``algo.eval_params``: Ditto's personal models) and the algorithm's extra ones."""
    out = {"the global model": state.w}
    params = algo.eval_params(state)
    if params is not state.w:
        out["the evaluated model" if params.dim() == 1 else "a per-client model"] = params
    for name, extra in algo.extra_eval_params(state).items():
        out[f"the {name} model"] = extra
    return out


def check_row(row: dict[str, Any], round_done: int, cfg: dict[str, Any]) -> None:
    """The losses an evaluated row reports are numbers: a finite model whose logits overflow
    reports NaN, which is divergence, not a result."""
    bad = [k for k, v in row.items() if "loss" in k.split("/")[-1]
           and isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise _diverged(round_done, f"{bad[0]} is not finite", cfg)
