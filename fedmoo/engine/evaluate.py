"""Evaluation of one model (or one model per client) on every client's split, in big passes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from fedmoo.data.federated import FederatedData
from fedmoo.engine.common import eval_chunk, forward_stats, gather, sample_losses
from fedmoo.engine.cpu_layout import each_row, row_workers, step_chunk, worker_models
from fedmoo.params import set_flat


@dataclass
class ClientEval:
    """Per-client results on one split: accuracy in %, mean loss, number of samples (``acc``,
    ``loss`` and ``correct`` are ``[N, S]`` on multi-task data)."""

    acc: np.ndarray
    loss: np.ndarray
    count: np.ndarray
    correct: np.ndarray


def evaluate_clients(model: nn.Module, data: FederatedData, split: str, params: Tensor,
                     clients: Tensor | None = None, chunk: int | None = None) -> ClientEval:
    """Evaluate ``params`` (``[d]``, or ``[N, d]`` one model per client) on each client's split.

    With one model, all clients' samples go through the network in a few large chunks
    (``chunk`` samples each; default ``eval_chunk``) and the per-client sums are formed with
    one ``index_add``. ``clients`` restricts one model's evaluation to a subset.
    """
    s = data.split(split)
    n_clients, dev = s.num_clients, data.x.device
    tail = (data.num_tasks,) if data.num_tasks else ()
    sums = torch.zeros(3, n_clients, *tail, dtype=torch.float64, device=dev)
    if params.dim() == 1:
        set_flat(model, params)
        owner = s.owner()
        index = s.index
        if clients is not None:
            mask = torch.isin(owner, clients.to(dev))
            owner, index = owner[mask], index[mask]
        loss, correct = _forward_stats(model, data, index, chunk)
        sums[0].index_add_(0, owner, loss.double())
        sums[1].index_add_(0, owner, correct.double())
        sums[2].index_add_(0, owner, torch.ones(loss.shape, dtype=torch.float64, device=dev))
    else:
        for k in range(n_clients):
            set_flat(model, params[k])
            loss, correct = forward_stats(model, data.x, data.y, s.of(k), data.task, chunk)
            sums[0, k], sums[1, k] = loss.double().sum(0), correct.double().sum(0)
            sums[2, k] = float(loss.shape[0])
    sums = sums.cpu().numpy()
    count = sums[2][:, 0] if tail else sums[2]
    denom = np.maximum(sums[2], 1)
    return ClientEval(acc=100.0 * sums[1] / denom, loss=sums[0] / denom, count=count,
                      correct=sums[1])


def _forward_stats(model: nn.Module, data: FederatedData, idx: Tensor,
                   chunk: int | None) -> tuple[Tensor, Tensor]:
    """``forward_stats`` of the samples ``idx``; on a CPU with several intra-op threads its
    chunks run side by side on copies of ``model`` (``each_row``), with the same numbers."""
    chunk = chunk or eval_chunk(data.x)
    starts = list(range(0, idx.numel(), chunk))
    workers = row_workers(model, data.x, len(starts))
    if workers <= 1:
        return forward_stats(model, data.x, data.y, idx, data.task, chunk)
    models = worker_models(model, workers)
    parts: list = [None] * len(starts)

    def run(k: int, c: int) -> None:
        b = idx[starts[c] : starts[c] + chunk]
        parts[c] = forward_stats(models[k], data.x, data.y, b, data.task, chunk)

    each_row(len(starts), workers, run)
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def improved_fraction(model: nn.Module, data: FederatedData, w_new: Tensor, client_ids: Tensor,
                      loss_before: Tensor) -> float:
    """Share of the cohort whose training loss at ``w_new`` is <= its loss at w_t (ties count
    as improved): FedMGDA+'s "percentage of improved participants". Losses within a relative
    1e-6 count as ties (the two losses come from differently ordered float reductions)."""
    ev = evaluate_clients(model, data, "train", w_new, clients=client_ids)
    ids = client_ids.cpu().numpy()
    after = ev.loss[ids]
    before = loss_before.detach().double().cpu().numpy()
    return float(np.mean(after <= before + 1e-6 * np.abs(before)))


def objective_gradient(model: nn.Module, data: FederatedData, params: Tensor, task_weights: Tensor,
                       weighting: str = "uniform") -> Tensor:
    """The full gradient ``[d]`` at ``params`` of ``sum_s task_weights[s] f_s`` over the training
    data of the whole federation (eval mode; one forward and backward pass per chunk of
    ``step_chunk`` samples on a CPU, ``eval_chunk`` on a GPU).

    ``f_s`` is objective s's training loss averaged over the clients that hold it (the
    federation's ``task_mask``; every client on single-task data, which has one objective):
    each client's mean loss weighted ``uniform`` (``1 / |R_s|``, FMOL's f_s) or by ``samples``
    (``n_k / sum n``). Clients without training samples are left out. ``task_weights [S]``.
    """
    split = data.train
    sizes = split.sizes.cpu().to(torch.float64)
    n_clients, s_count = sizes.numel(), int(task_weights.numel())
    held = (torch.ones(n_clients, s_count, dtype=torch.float64) if data.task_mask is None
            else data.task_mask.cpu().to(torch.float64).reshape(n_clients, s_count))
    held = held * (sizes > 0).to(torch.float64)[:, None]
    if weighting == "samples":
        per_sample = held / (held * sizes[:, None]).sum(0).clamp_min(1.0)
    else:
        per_sample = held / held.sum(0).clamp_min(1.0) / sizes.clamp_min(1.0)[:, None]
    per_sample = per_sample * task_weights.cpu().to(torch.float64)[None, :]     # [N, S]
    set_flat(model, params)
    trainable = [p for p in model.parameters() if p.requires_grad]
    grads = [torch.zeros_like(p) for p in trainable]
    weight = per_sample.to(device=params.device, dtype=params.dtype)[split.owner()]  # [M, S]
    was_training = model.training
    model.eval()
    chunk = step_chunk(data.x) or eval_chunk(data.x)
    starts = list(range(0, split.index.numel(), chunk))
    workers = row_workers(model, data.x, len(starts))
    models = worker_models(model, workers)
    wave: list = [None] * workers

    def chunk_grad(k: int, c: int) -> None:         # the gradient of chunk starts[c]
        m, start = models[k], starts[c]
        b = split.index[start : start + chunk]
        losses = sample_losses(m(gather(data.x, b)), gather(data.y, b), data.task)
        losses = losses.reshape(losses.shape[0], -1)              # [B, S] (S = 1: [B, 1])
        total = (losses * weight[start : start + chunk].to(losses.dtype)).sum()
        params = [p for p in m.parameters() if p.requires_grad]
        wave[c % workers] = torch.autograd.grad(total, params, allow_unused=True)

    try:     # waves of one chunk per worker, summed in chunk order: the same numbers
        for first in range(0, len(starts), workers):
            count = min(workers, len(starts) - first)
            each_row(count, workers, lambda k, c: chunk_grad(k, first + c))
            for part in wave[:count]:
                for acc, g in zip(grads, part):
                    if g is not None:
                        acc.add_(g)
    finally:
        model.train(was_training)
    return torch.cat([g.reshape(-1) for g in grads])
