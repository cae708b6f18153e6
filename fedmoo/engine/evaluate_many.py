"""Evaluation of several runs' models on one split at once (a lockstep group's evaluated round).

Runs trained together on the same partition evaluate their global models on the same samples;
with the closed-form head (fedmoo.engine.linear_head) all M models' logits come from one GEMM
per chunk of samples (``LinearHead.stats``), so the split is read once per round for the group
instead of once per run. The per-client sums are those of fedmoo.engine.evaluate.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedmoo.data.federated import FederatedData
from fedmoo.engine.common import eval_chunk, gather
from fedmoo.engine.evaluate import ClientEval


def evaluate_models(engine, data: FederatedData, split: str, params: list[Tensor],
                    clients: Tensor | None = None) -> list[ClientEval] | None:
    """``evaluate_clients`` of each flat model in ``params`` (``[d]`` each) on ``split`` of
    ``data`` (only ``clients``' samples when given), as one pass; None when ``engine`` has no
    closed-form head (then each run evaluates its own model)."""
    head = getattr(engine, "head", None)
    if head is None or data.num_tasks:
        return None
    if any(p.dim() != 1 for p in params):
        raise ValueError("evaluate_models: one flat model [d] per run")
    m = len(params)
    views = engine.layout.empty(m, params[0])
    for i, p in enumerate(params):
        engine.layout.pack(p, views, slice(i, i + 1))
    w, bias = views[head.wi], (None if head.bi is None else views[head.bi])
    s = data.split(split)
    owner, index = s.owner(), s.index
    dev = data.x.device
    if clients is not None:
        keep = torch.zeros(s.num_clients, dtype=torch.bool, device=dev)
        keep[clients.to(dev)] = True
        owner, index = owner[keep[owner]], index[keep[owner]]
    sums = torch.zeros(3, s.num_clients, m, dtype=torch.float64, device=dev)
    chunk = eval_chunk(data.x)
    for c in range(0, index.numel(), chunk):
        idx = index[c:c + chunk]
        target = data.y[idx].unsqueeze(1).expand(-1, m)
        loss, correct = head.stats(gather(data.x, idx).flatten(1), w, bias, target)
        sums[0].index_add_(0, owner[c:c + chunk], loss.double())
        sums[1].index_add_(0, owner[c:c + chunk], correct.double())
    sums[2].index_add_(0, owner, torch.ones(owner.numel(), m, dtype=torch.float64, device=dev))
    sums = sums.cpu().numpy()
    denom = np.maximum(sums[2], 1)
    return [ClientEval(acc=100.0 * sums[1, :, i] / denom[:, i], loss=sums[0, :, i] / denom[:, i],
                       count=sums[2, :, i], correct=sums[1, :, i]) for i in range(m)]
