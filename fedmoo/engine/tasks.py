"""Per-task training rows shared by both engines (FMGDA / FSMGDA, ``ClientSpec.task_training``).

Single-task data counts as one task (S = 1) that every client holds.

Every (client, task) pair the client holds is one independent training from ``w_t``: a row. Rows
are ordered client by client (cohort order), tasks ascending within a client; both engines draw
the rows' minibatches from one generator in that order, so they train on the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fedmoo.data.federated import FederatedData
from fedmoo.models.multitask import param_tasks
from fedmoo.state import ClientSpec, Cohort


@dataclass
class TaskRows:
    mask: Tensor      # [K, S] bool: cohort client k trains task s
    client: Tensor    # [R] int64 cohort position of each row
    task: Tensor      # [R] int64 task of each row
    weights: Tensor   # [R, S] one-hot task weights of each row's loss
    owner: Tensor     # [d] int64 task owning each parameter coordinate, -1 = shared trunk

    @property
    def count(self) -> int:
        return int(self.client.numel())

    @classmethod
    def build(cls, model: nn.Module, data: FederatedData, client_ids: Tensor, spec: ClientSpec,
              w: Tensor) -> "TaskRows":
        """The rows of ``spec.task_training``; ``spec.eval_trained`` (one trained model per
        client) has no meaning there."""
        if spec.eval_trained:
            raise ValueError("ClientSpec.eval_trained is not available with task_training "
                             "(per-task rows have no single trained model per client)")
        tt = spec.task_training
        s = data.num_tasks or 1         # single-task data: one objective, task 0
        k = client_ids.numel()
        if tt.tasks is not None:
            mask = tt.tasks.to(torch.bool).cpu()
        elif data.task_mask is not None:
            mask = data.task_mask.cpu()[client_ids.cpu()]
        else:
            mask = torch.ones(k, s, dtype=torch.bool)
        if tuple(mask.shape) != (k, s):
            raise ValueError(f"task mask has shape {tuple(mask.shape)}, expected {(k, s)}")
        client, task = mask.nonzero(as_tuple=True)
        dev = w.device
        return cls(mask=mask.to(dev), client=client.to(dev), task=task.to(dev),
                   weights=torch.eye(s, dtype=w.dtype, device=dev)[task.to(dev)],
                   owner=param_tasks(model).to(dev))


def task_cohort(rows: TaskRows, client_ids: Tensor, w: Tensor, flat: Tensor, lr: float,
                loss_before: Tensor, acc_before: Tensor, loss_after: Tensor,
                num_samples: Tensor) -> Cohort:
    """The ``[K, S, d]`` cohort from the rows' final parameters ``flat [R, d]``.

    ``loss_before`` / ``acc_before`` ``[K, S]`` (``[K]`` on single-task data) are w_t's per-task
    train loss and accuracy on each client, ``loss_after [R]`` each row's last-epoch loss. Row (k, s) gives
    ``deltas[k, s] = (w - x_K) / lr`` on the trunk and head s, exactly 0 on the other heads. The
    per-client scalars are means over the client's tasks (over all tasks if it trains none).
    """
    k, s = rows.mask.shape
    loss_before, acc_before = loss_before.reshape(k, s), acc_before.reshape(k, s)
    deltas = torch.zeros(k, s, w.numel(), dtype=w.dtype, device=w.device)
    for r, (i, t) in enumerate(zip(rows.client.tolist(), rows.task.tolist())):
        keep = (rows.owner == -1) | (rows.owner == t)
        deltas[i, t] = torch.where(keep, (w - flat[r]) / lr, torch.zeros((), dtype=w.dtype))
    held = rows.mask.to(w.dtype)
    held = torch.where(held.sum(1, keepdim=True) > 0, held, torch.ones_like(held))
    per_client = lambda v: (v * held).sum(1) / held.sum(1)  # noqa: E731
    after = torch.zeros(k, s, dtype=w.dtype, device=w.device)
    after[rows.client, rows.task] = loss_after
    after = torch.where(rows.mask, after, loss_before.to(w.dtype))
    return Cohort(
        client_ids=client_ids, deltas=deltas, num_samples=num_samples.to(w.dtype),
        loss_before=per_client(loss_before.to(w.dtype)), loss_after=per_client(after),
        acc_before=per_client(acc_before.to(w.dtype)), local_lr=lr, task_mask=rows.mask,
        shared=rows.owner == -1,
    )
