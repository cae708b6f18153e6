"""The fast engine: the K cohort clients train in lockstep as one batched program.

All client copies live in one ``[R, d]`` block (R = K, or 2K with Ditto's personal models) with a
view per parameter tensor (fedmoo.engine.layout). Each local step gathers the K minibatches with
one index kernel, runs the model once for all rows with ``torch.vmap(functional_call)``
(``randomness='different'``: dropout masks are independent per client), differentiates
``sum_r scale_r * loss_r`` (the sum over clients, so each row gets its own client's gradient) and
applies SGD (momentum, weight decay, proximal term) with per-row factors. Unequal clients are
padded (fedmoo.engine.plan): a padded sample has weight 0 and a padded step has learning rate 0.
Nothing in the local loop reads a tensor on the host.

It reproduces the sequential engine (same batches, same math) up to floating-point reduction
order; tests/engine checks this in float64.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from fedmoo.data.federated import FederatedData
from fedmoo.engine.common import LocalTraining, forward_stats, objective_losses, relabel
from fedmoo.engine.layout import ParamLayout
from fedmoo.engine.plan import make_plan
from fedmoo.engine.tasks import TaskRows, task_cohort
from fedmoo.errors import UserError
from fedmoo.params import set_flat
from fedmoo.state import ClientSpec, Cohort

# Modules that torch.vmap cannot batch over per-client weights (no batching rule, or in-place
# running statistics shared across clients).
UNBATCHABLE = (nn.RNNBase, nn.modules.batchnorm._BatchNorm)

Rows = float | Tensor  # a hyperparameter shared by all rows, or one value per row ``[R]``


def _per_row(v: Tensor, like: Tensor) -> Tensor:
    return v.view(-1, *(1,) * (like.dim() - 1))


def _axpy(y: Tensor, a: Rows, x: Tensor) -> Tensor:
    """``y += a * x`` in place, with ``a`` a number or one factor per row."""
    return y.add_(x, alpha=a) if isinstance(a, float) else y.addcmul_(_per_row(a, y), x)


def _scale(y: Tensor, a: Rows) -> Tensor:
    return y.mul_(a if isinstance(a, float) else _per_row(a, y))


def check_batchable(model: nn.Module) -> None:
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.track_running_stats:
            continue
        if isinstance(m, UNBATCHABLE):
            raise UserError(
                f"engine=batched cannot train this model: module {name or 'model'!r} is "
                f"{type(m).__name__} (no per-client batching); use engine=sequential, or a model "
                "written with plain tensor ops (hand-written LSTM cell, GroupNorm)"
            )


class BatchedEngine(LocalTraining):
    def __init__(self, model: nn.Module, data: FederatedData, lr: float, batch_size: int | None,
                 epochs: int = 1, local_steps: int | None = None, momentum: float = 0.0,
                 weight_decay: float = 0.0, compile: bool = False):
        check_batchable(model)
        super().__init__(model, data, lr, batch_size, epochs, local_steps, momentum, weight_decay)
        self.layout = ParamLayout(model)
        self._offsets = data.train.offsets.cpu()
        self._sizes = data.train.sizes.cpu()
        self._vloss = torch.vmap(self._client_loss, randomness="different")
        self._grad = torch.func.grad(self._total_loss, has_aux=True)
        self._step = torch.compile(self._sgd_step, dynamic=False) if compile else self._sgd_step

    # -- the batched program ------------------------------------------------------------------
    def _client_loss(self, params: dict[str, Tensor], x: Tensor, y: Tensor, weight: Tensor,
                     task_weights: Tensor | None = None) -> Tensor:
        """One row's minibatch loss: the mean over its real samples (weights 1/b or 0); on
        multi-task data weighted over tasks by ``task_weights [S]`` (default: the task mean)."""
        out = functional_call(self.model, params, (x,))
        return (objective_losses(out, y, self.data.task, task_weights) * weight).sum()

    def _total_loss(self, views: tuple[Tensor, ...], x, y, weight, scale, task_weights=None):
        params = self.layout.params(list(views))
        if task_weights is None:
            losses = self._vloss(params, x, y, weight)
        else:
            losses = self._vloss(params, x, y, weight, task_weights)
        total = losses.sum() if scale is None else (losses * scale).sum()
        return total, losses

    def _sgd_step(self, views: list[Tensor], bufs: list[Tensor] | None, x: Tensor, y: Tensor,
                  weight: Tensor, lr: Rows, scale: Tensor | None, mu: Rows | None,
                  momentum: Rows | None, anchor: list[Tensor],
                  task_weights: Tensor | None = None) -> Tensor:
        """One SGD step of every row, in place on ``views``; returns the rows' minibatch losses.

        Per row r: g = scale_r dL_r + mu_r (p - anchor) + wd p; buf = m_r buf + g (torch.optim.SGD:
        the buffer starts at the first g); p -= lr_r buf. lr is 0 for rows on a padded step.
        ``lr``, ``mu`` and ``momentum`` are numbers when all rows share them, else ``[R]`` tensors.
        """
        grads, losses = self._grad(tuple(views), x, y, weight, scale, task_weights)
        neg_lr = -lr if isinstance(lr, float) else lr.neg()
        with torch.no_grad():
            for i, (p, g) in enumerate(zip(views, grads)):
                if mu is not None:
                    _axpy(g, mu, p - anchor[i])
                if self.weight_decay:
                    g.add_(p, alpha=self.weight_decay)
                if bufs is not None:
                    g = _scale(bufs[i], momentum).add_(g)
                _axpy(p, neg_lr, g)
        return losses.detach()

    # -- one round ----------------------------------------------------------------------------
    def _before(self, ids: list[int], w: Tensor,
                label_map: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Mean loss, accuracy (%) and size of w on each cohort client's train set, one pass
        (``[K]``, or ``[K, S]`` per task on multi-task data)."""
        data, dev = self.data, w.device
        sizes = self._sizes[ids]
        pos = np.concatenate([np.arange(int(self._offsets[k]), int(self._offsets[k + 1])) for k in ids])
        owner = torch.from_numpy(np.repeat(np.arange(len(ids)), sizes.numpy())).to(dev)
        set_flat(self.model, w)
        samples = data.train.index[torch.from_numpy(pos).to(dev)]
        targets = None if label_map is None else label_map[owner, data.y[samples]]
        loss, correct = forward_stats(self.model, data.x, data.y, samples, data.task,
                                      targets=targets)
        sums = torch.zeros(2, len(ids), *loss.shape[1:], dtype=w.dtype, device=dev)
        sums[0].index_add_(0, owner, loss.to(w.dtype))
        sums[1].index_add_(0, owner, correct.to(w.dtype))
        n = sizes.to(device=dev, dtype=w.dtype).view(-1, *(1,) * (loss.dim() - 1))
        return sums[0] / n, 100.0 * sums[1] / n, n.flatten()

    def _train_tasks(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        """Per-task training: the (client, task) pairs are the rows of one ``[R, d]`` block."""
        data, layout, tt = self.data, self.layout, spec.task_training
        layout.numel_check(w.numel())
        ids = client_ids.tolist()
        rows = TaskRows.build(self.model, data, client_ids, tt, w)
        dev, dtype = w.device, w.dtype
        loss_before, acc_before, num_samples = self._before(ids, w, None)
        if rows.count == 0:
            return task_cohort(rows, client_ids, w, w[None], self.lr, loss_before, acc_before,
                               torch.zeros(0, dtype=dtype, device=dev), num_samples)
        row_clients = [ids[i] for i in rows.client.tolist()]
        plan = make_plan(row_clients, self._offsets, self._sizes,
                         None if tt.full_batch else self.batch_size, 1, tt.local_steps,
                         torch.Generator().manual_seed(seed), data.train.index, dtype)
        block = layout.pack(w, torch.empty(rows.count, layout.dim, dtype=dtype, device=dev))
        views = layout.views(block)
        anchor = layout.views(layout.pack(w, torch.empty(1, layout.dim, dtype=dtype, device=dev)))
        bufs = [torch.zeros_like(v) for v in views] if self.momentum else None
        momentum = self.momentum if self.momentum else None
        scale = None
        if spec.loss_scale is not None:
            scale = spec.loss_scale.to(device=dev, dtype=dtype).reshape(-1)[rows.client]
        loss_after = torch.zeros(rows.count, dtype=dtype, device=dev)
        lr_plan = self.lr * plan.active
        self.model.train()
        for s in range(plan.steps):
            idx, weight = plan.index[:, s], plan.weight[:, s]
            lr = self.lr if plan.full[s] else lr_plan[:, s]
            losses = self._step(views, bufs, data.x[idx], data.y[idx], weight, lr, scale, None,
                                momentum, anchor, rows.weights)
            loss_after += losses * plan.last[:, s]
        return task_cohort(rows, client_ids, w, layout.unpack(block), self.lr, loss_before,
                           acc_before, loss_after, num_samples)

    def train(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        if spec.task_training is not None:
            return self._train_tasks(client_ids, w, spec, seed)
        data, layout = self.data, self.layout
        layout.numel_check(w.numel())
        ids = client_ids.tolist()
        k, dev, dtype = len(ids), w.device, w.dtype
        plan = make_plan(ids, self._offsets, self._sizes, self.batch_size, self.epochs,
                         self.local_steps, torch.Generator().manual_seed(seed), data.train.index,
                         dtype)
        label_map = None if spec.label_map is None else spec.label_map.to(data.y.device)
        loss_before, acc_before, num_samples = self._before(ids, w, label_map)
        if loss_before.dim() == 2:                     # multi-task data: mean over the tasks
            loss_before, acc_before = loss_before.mean(1), acc_before.mean(1)

        ditto = spec.personal is not None
        rows = 2 * k if ditto else k
        block = torch.empty(rows, layout.dim, dtype=dtype, device=dev)
        layout.pack(w, block[:k])
        if ditto:
            layout.pack(spec.personal.to(device=dev, dtype=dtype), block[k:])
        views = layout.views(block)
        anchor = layout.views(layout.pack(w, torch.empty(1, layout.dim, dtype=dtype, device=dev)))

        def per_row(global_value: float, personal_value: float) -> Rows:
            if not ditto:
                return global_value
            return torch.tensor([global_value] * k + [personal_value] * k, dtype=dtype).to(dev)

        lr_plan = self.lr * (plan.active.repeat(2, 1) if ditto else plan.active)
        use_prox = bool(spec.prox_mu) or (ditto and bool(spec.personal_lam))
        mu = per_row(float(spec.prox_mu), float(spec.personal_lam)) if use_prox else None
        momentum = per_row(self.momentum, 0.0) if self.momentum else None
        bufs = [torch.zeros_like(v) for v in views] if self.momentum else None
        scale = None
        if spec.loss_scale is not None:
            scale = spec.loss_scale.to(device=dev, dtype=dtype).reshape(k)
            scale = scale.repeat(2) if ditto else scale

        loss_after = torch.zeros(k, dtype=dtype, device=dev)
        self.model.train()
        for s in range(plan.steps):
            idx, weight = plan.index[:, s], plan.weight[:, s]
            x, y = data.x[idx], relabel(label_map, data.y[idx])
            if ditto:
                x, y, weight = torch.cat([x, x]), torch.cat([y, y]), torch.cat([weight, weight])
            lr = self.lr if plan.full[s] else lr_plan[:, s]
            losses = self._step(views, bufs, x, y, weight, lr, scale, mu, momentum, anchor)
            loss_after += losses[:k] * plan.last[:, s]

        flat = layout.unpack(block)
        return Cohort(
            client_ids=client_ids, deltas=w.unsqueeze(0) - flat[:k], num_samples=num_samples,
            loss_before=loss_before, loss_after=loss_after, acc_before=acc_before,
            local_lr=self.lr, personal=flat[k:] if ditto else None,
        )
