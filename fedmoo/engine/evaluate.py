"""Evaluation of one model (or one model per client) on every client's split, in big passes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from fedmoo.data.federated import FederatedData
from fedmoo.engine.common import forward_stats
from fedmoo.params import set_flat


@dataclass
class ClientEval:
    """Per-client results on one split: accuracy in %, mean loss, number of samples.

    On multi-task data ``acc``, ``loss`` and ``correct`` are ``[N, S]`` (one column per task).
    """

    acc: np.ndarray
    loss: np.ndarray
    count: np.ndarray
    correct: np.ndarray


def evaluate_clients(model: nn.Module, data: FederatedData, split: str, params: Tensor,
                     clients: Tensor | None = None) -> ClientEval:
    """Evaluate ``params`` (``[d]``, or ``[N, d]`` one model per client) on each client's split.

    With one model, all clients' samples go through the network in a few large chunks and the
    per-client sums are formed with one ``scatter_add``. ``clients`` restricts to a subset.
    """
    s = data.split(split)
    n_clients = s.num_clients
    dev = data.x.device
    if params.dim() == 1:
        set_flat(model, params)
        owner = s.owner()
        index = s.index
        if clients is not None:
            keep = torch.zeros(n_clients, dtype=torch.bool, device=dev)
            keep[clients.to(dev)] = True
            mask = keep[owner]
            owner, index = owner[mask], index[mask]
        loss, correct = forward_stats(model, data.x, data.y, index, data.task)
        tail = loss.shape[1:]
        sums = torch.zeros(3, n_clients, *tail, dtype=torch.float64, device=dev)
        if tail:
            sums[0].index_add_(0, owner, loss.double())
            sums[1].index_add_(0, owner, correct.double())
        else:
            sums[0].scatter_add_(0, owner, loss.double())
            sums[1].scatter_add_(0, owner, correct.double())
        sums[2].index_add_(0, owner, torch.ones(loss.shape, dtype=torch.float64, device=dev))
    else:
        tail = (data.num_tasks,) if data.num_tasks else ()
        sums = torch.zeros(3, n_clients, *tail, dtype=torch.float64, device=dev)
        ids = range(n_clients) if clients is None else clients.tolist()
        for k in ids:
            set_flat(model, params[k])
            loss, correct = forward_stats(model, data.x, data.y, s.of(k), data.task)
            sums[0, k], sums[1, k] = loss.double().sum(0), correct.double().sum(0)
            sums[2, k] = float(loss.shape[0])
    sums = sums.cpu().numpy()
    count = sums[2] if sums.ndim == 2 else sums[2][:, 0]
    denom = np.maximum(sums[2], 1)
    return ClientEval(acc=100.0 * sums[1] / denom, loss=sums[0] / denom, count=count,
                      correct=sums[1])


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
