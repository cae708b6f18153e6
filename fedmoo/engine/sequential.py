"""The reference engine: a plain loop over the cohort's clients, one model, minibatch SGD.

It is deliberately simple; the batched engine must reproduce its numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import Tensor, nn

from fedmoo.data.federated import FederatedData
from fedmoo.engine.base import LocalSGD
from fedmoo.engine.common import (client_batches, forward_stats, gather, objective_losses,
                                  param_views, relabel)
from fedmoo.engine.cpu_layout import (each_row, fast_layout, row_workers, step_chunk,
                                      worker_models)
from fedmoo.engine.tasks import TaskRows, task_cohort
from fedmoo.params import get_flat, set_flat
from fedmoo.state import ClientSpec, Cohort


class SGD:
    """Minibatch SGD with ``torch.optim.SGD``'s single-tensor arithmetic (no dampening, no
    Nesterov; bit-identical): ``d = g + wd * p``; ``b = d`` on the first step, else
    ``b = m * b + d``; ``p -= lr * b``; a parameter without a gradient takes no step. Not
    ``torch.optim.SGD`` itself: its first ``step()`` imports ``torch._dynamo`` (about 1.5 s a
    run)."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params: list[Tensor] = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), float(weight_decay)
        self.buffers: list[Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d = p.grad
            if self.weight_decay:
                d = d.add(p, alpha=self.weight_decay)
            if self.momentum:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = torch.clone(d).detach()
                else:
                    buf.mul_(self.momentum).add_(d)
                d = buf
            p.add_(d, alpha=-self.lr)


def sgd_step(opt: SGD, loss: Tensor, anchor: list[Tensor], mu: float, scale=None) -> Tensor:
    """One step of ``opt`` on ``scale * loss + (mu/2)||w - anchor||^2``; returns ``loss``."""
    opt.zero_grad()
    (loss if scale is None else loss * scale).backward()
    if mu:
        with torch.no_grad():
            for p, a in zip(opt.params, anchor):
                p.grad.add_(p - a, alpha=mu)
    opt.step()
    return loss.detach()


def last_epoch_loss(idx: Tensor, batches,
                    step: Callable[[Tensor], Tensor | float]) -> Tensor | float:
    """``step(b)`` on each minibatch ``b`` of the samples ``idx`` that ``batches`` (from
    ``client_batches``) lays out; returns the mean loss over the last epoch."""
    last_ep, last_sum, last_cnt = batches[-1][0], 0.0, 0
    for ep, pos in batches:
        b = idx[pos.to(idx.device)]
        loss = step(b)
        if ep == last_ep:
            last_sum = last_sum + loss * b.numel()
            last_cnt += b.numel()
    return last_sum / last_cnt


class SequentialEngine:
    """``fedmoo.engine.base.Engine``: trains ``model`` on ``data``'s clients with ``sgd``."""

    name = "sequential"
    choice: str | None = None   # set by fedmoo.engine.build when engine=auto chose it

    def __init__(self, model: nn.Module, data: FederatedData, sgd: LocalSGD):
        self.model, self.data, self.sgd = model, data, sgd
        self.personal_model = copy.deepcopy(model)
        self._task_model: nn.Module | None = None   # per-task training's copy (fast_layout)
        self._task_models: list[nn.Module] = []     # its copies for more row workers

    def _optimizer(self, model: nn.Module, momentum: float) -> SGD:
        return SGD(model.parameters(), lr=self.sgd.lr, momentum=momentum,
                   weight_decay=self.sgd.weight_decay)

    def _step(self, model, opt, xb, yb, anchor: list[Tensor], mu: float, scale,
              task_weights: Tensor | None = None) -> Tensor:
        """``sgd_step`` on the mean loss of the minibatch ``xb``, ``yb``."""
        loss = objective_losses(model(xb), yb, self.data.task, task_weights).mean()
        return sgd_step(opt, loss, anchor, mu, scale)

    def train(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        if spec.task_training is not None:
            return self._train_tasks(client_ids, w, spec, seed)
        data, model, task, sgd = self.data, self.model, self.data.task, self.sgd
        gen = torch.Generator().manual_seed(seed)
        k_count, dev = client_ids.numel(), w.device
        deltas = torch.empty(k_count, w.numel(), dtype=w.dtype, device=dev)
        stats = torch.zeros(4, k_count, dtype=w.dtype, device=dev)  # loss_b, acc_b, loss_a, n
        trained = torch.zeros(2, k_count, dtype=w.dtype, device=dev) if spec.eval_trained else None
        personal = None if spec.personal is None else spec.personal.clone()
        label_map = None if spec.label_map is None else spec.label_map.to(data.y.device)
        anchor = param_views(model, w)
        model.train()
        for i, k in enumerate(client_ids.tolist()):
            idx = data.train.of(k)
            n = idx.numel()
            set_flat(model, w)
            cmap = None if label_map is None else label_map[i]
            targets = None if cmap is None else relabel(cmap, data.y[idx])
            stats[3, i] = n
            if spec.measure_before:
                lb, cb = forward_stats(model, data.x, data.y, idx, task, targets=targets)
                stats[0, i], stats[1, i] = lb.mean(), 100.0 * cb.mean()   # all tasks
            opt = self._optimizer(model, sgd.momentum)
            if personal is not None:
                set_flat(self.personal_model, personal[i])
                popt = self._optimizer(self.personal_model, 0.0)
            scale = None if spec.loss_scale is None else spec.loss_scale[i]

            def step(b: Tensor) -> Tensor:
                xb, yb = gather(data.x, b), relabel(cmap, gather(data.y, b))
                if personal is not None:
                    self._step(self.personal_model, popt, xb, yb, anchor, spec.personal_lam, scale)
                return self._step(model, opt, xb, yb, anchor, spec.prox_mu, scale)

            batches = client_batches(n, sgd.batch_size, sgd.epochs, sgd.local_steps, gen)
            stats[2, i] = last_epoch_loss(idx, batches, step)
            if trained is not None:      # the trained model on the whole local training set
                la, ca = forward_stats(model, data.x, data.y, idx, task, targets=targets)
                trained[0, i], trained[1, i] = la.mean(), 100.0 * ca.mean()
            deltas[i] = w - get_flat(model)
            if personal is not None:
                personal[i] = get_flat(self.personal_model)
        before = spec.measure_before
        return Cohort(
            client_ids=client_ids, deltas=deltas, num_samples=stats[3],
            loss_before=stats[0] if before else None, loss_after=stats[2],
            acc_before=stats[1] if before else None, local_lr=sgd.lr, personal=personal,
            loss_trained=None if trained is None else trained[0],
            acc_trained=None if trained is None else trained[1],
        )

    def _chunked_step(self, model, opt, b: Tensor, scale, task_weights: Tensor) -> Tensor:
        """One SGD step on ``scale * mean loss`` over the samples ``b``, the gradient summed over
        chunks of ``step_chunk`` samples (bounded memory; on a CPU the chunks stay in cache).
        Equal to ``_step`` on the whole batch up to the order of the float sums; returns the
        mean loss."""
        x, y, n = self.data.x, self.data.y, b.numel()
        chunk = step_chunk(x) or n
        if chunk >= n:
            return self._step(model, opt, gather(x, b), gather(y, b), [], 0.0, scale,
                              task_weights)
        opt.zero_grad()
        total = 0.0
        for s in range(0, n, chunk):
            part = b[s : s + chunk]
            losses = objective_losses(model(gather(x, part)), gather(y, part), self.data.task,
                                      task_weights)
            loss = losses.sum() / n
            (loss if scale is None else loss * scale).backward()
            total = total + loss.detach()
        opt.step()
        return total

    def _train_tasks(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        """Per-task training (FMGDA / FSMGDA): every held (client, task) pair from ``w``, on the
        engine's ``fast_layout`` copies of the model; steps over many samples (FMGDA's full local
        batch) sum their gradient over chunks. On a CPU with several intra-op threads the rows
        run side by side, one thread each (``each_row``); the numbers stay the same."""
        data, tt = self.data, spec.task_training
        rows = TaskRows.build(self.model, data, client_ids, spec, w)
        if self._task_model is None:
            self._task_model = fast_layout(self.model, data.x)
        model = self._task_model
        gen = torch.Generator().manual_seed(seed)
        batch = None if tt.full_batch else self.sgd.batch_size
        flat = torch.empty(rows.count, w.numel(), dtype=w.dtype, device=w.device)
        loss_after = torch.zeros(rows.count, dtype=w.dtype, device=w.device)
        row_client = rows.client.tolist()
        idxs = [data.train.of(int(client_ids[i])) for i in row_client]
        plans = [client_batches(idx.numel(), batch, 1, tt.local_steps, gen) for idx in idxs]
        workers = row_workers(model, data.x, max(rows.count, client_ids.numel()))
        models = worker_models(model, workers, self._task_models)
        for m in models:
            set_flat(m, w)
        chunk, ids = step_chunk(data.x), client_ids.tolist()
        before: list = [None] * len(ids)

        def client_stats(k: int, c: int) -> None:      # w's per-task losses on client c
            before[c] = forward_stats(models[k], data.x, data.y, data.train.of(int(ids[c])),
                                      data.task, chunk)

        each_row(len(ids), workers, client_stats)

        def train_row(k: int, r: int) -> None:
            m, i, idx, batches = models[k], row_client[r], idxs[r], plans[r]
            set_flat(m, w)
            m.train()
            opt = self._optimizer(m, self.sgd.momentum)
            scale = None if spec.loss_scale is None else spec.loss_scale[i]
            loss_after[r] = last_epoch_loss(
                idx, batches, lambda b: self._chunked_step(m, opt, b, scale, rows.weights[r]))
            flat[r] = get_flat(m)

        each_row(rows.count, workers, train_row)
        loss_b = torch.stack([lb.mean(0) for lb, _ in before]).to(w.dtype)
        acc_b = torch.stack([100.0 * cb.mean(0) for _, cb in before]).to(w.dtype)
        return task_cohort(rows, client_ids, w, flat, self.sgd.lr, loss_b, acc_b, loss_after,
                           data.train.sizes[client_ids.to(data.train.sizes.device)])
