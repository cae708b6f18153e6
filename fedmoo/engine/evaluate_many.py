"""Evaluation of several runs' models on one split at once (a lockstep group's evaluated round
with ``hydra.launcher.invariant=false``; by default each run evaluates its own model).

Runs trained together on the same partition evaluate their global models on the same samples,
so the split is read once per round for the group instead of once per run:

- with the closed-form head (fedmoo.engine.linear_head) all M models' logits come from one GEMM
  per chunk of samples (``LinearHead.stats``);
- with the lockstep program (fedmoo.engine.lockstep; convolutional nets, MLPs) the M models run
  as M stacked rows on the same chunk, in eval mode (the program was checked against the model
  in eval mode when it was built), with M times smaller chunks. On CUDA only (STACKED_ON_CPU):
  on the 2-core CPU it is slower than the runs' own evaluations, which run chunks side by side
  there (scripts/microbench.py: 8 MLPs 1.28x, 4 CIFAR CNNs 1.13x the time).

The per-client sums are those of fedmoo.engine.evaluate; the numbers agree with each run's own
evaluation to floating-point rounding (other kernels: batched products, grouped convolutions).
Models with neither (the vmap program: LSTMs) and multi-task data evaluate run by run.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedmoo.data.federated import FederatedData
from fedmoo.engine.common import eval_chunk, gather, sample_correct, sample_losses
from fedmoo.engine.evaluate import ClientEval

STACKED_ON_CPU = False   # the lockstep program's stacked evaluation off CUDA (tests turn it on)


def evaluate_models(engine, data: FederatedData, split: str, params: list[Tensor],
                    clients: Tensor | None = None) -> list[ClientEval] | None:
    """``evaluate_clients`` of each flat model in ``params`` (``[d]`` each) on ``split`` of
    ``data`` (only ``clients``' samples when given), as one pass; None when ``engine`` has
    neither the closed-form head nor the lockstep program (then each run evaluates its own
    model)."""
    head, program = getattr(engine, "head", None), getattr(engine, "program", None)
    if data.x.device.type != "cuda" and not STACKED_ON_CPU:
        program = None
    if (head is None and program is None) or data.num_tasks:
        return None
    if any(p.dim() != 1 for p in params):
        raise ValueError("evaluate_models: one flat model [d] per run")
    m = len(params)
    views = engine.layout.empty(m, params[0])
    for i, p in enumerate(params):
        engine.layout.pack(p, views, slice(i, i + 1))
    s = data.split(split)
    owner, index = s.owner(), s.index
    dev = data.x.device
    if clients is not None:
        keep = torch.zeros(s.num_clients, dtype=torch.bool, device=dev)
        keep[clients.to(dev)] = True
        owner, index = owner[keep[owner]], index[keep[owner]]
    sums = torch.zeros(3, s.num_clients, m, dtype=torch.float64, device=dev)
    if head is not None:
        stats, chunk = _head_stats(head, views, m), eval_chunk(data.x)
    else:
        stats = _program_stats(engine, program, views, m, data.task)
        chunk = max(1, eval_chunk(data.x) // m)
    for c in range(0, index.numel(), chunk):
        idx = index[c:c + chunk]
        loss, correct = stats(gather(data.x, idx), data.y[idx])
        sums[0].index_add_(0, owner[c:c + chunk], loss.double())
        sums[1].index_add_(0, owner[c:c + chunk], correct.double())
    sums[2].index_add_(0, owner, torch.ones(owner.numel(), m, dtype=torch.float64, device=dev))
    sums = sums.cpu().numpy()
    denom = np.maximum(sums[2], 1)
    return [ClientEval(acc=100.0 * sums[1, :, i] / denom[:, i], loss=sums[0, :, i] / denom[:, i],
                       count=sums[2, :, i], correct=sums[1, :, i]) for i in range(m)]


def _head_stats(head, views: list[Tensor], m: int):
    """Per-sample ``[n, M]`` loss and correctness of the M closed-form heads."""
    w, bias = views[head.wi], (None if head.bi is None else views[head.bi])

    def stats(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        return head.stats(x.flatten(1), w, bias, y.unsqueeze(1).expand(-1, m))

    return stats


def _program_stats(engine, program, views: list[Tensor], m: int, task: str):
    """Per-sample ``[n, M]`` loss and correctness of the M models run as stacked rows by the
    lockstep program, in eval mode and without autograd."""
    model = engine.model

    def stats(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out, _ = program.forward(views, x.unsqueeze(0).expand(m, *x.shape), None, None)
        finally:
            model.train(was_training)
        flat, ys = out.flatten(0, 1), y.unsqueeze(0).expand(m, *y.shape).flatten(0, 1)
        n = y.shape[0]
        return (sample_losses(flat, ys, task).view(m, n).T,
                sample_correct(flat, ys, task).view(m, n).T)

    return stats
