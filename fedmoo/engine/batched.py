"""The fast engine: the cohort's clients (and Ditto's personal copies) train in lockstep as one
batched program on stacked parameters (fedmoo.engine.layout), with per-row SGD
(fedmoo.engine.rowsgd) and padded minibatch plans (fedmoo.engine.plan). The program is the
lockstep program (fedmoo.engine.lockstep) or, for models fx cannot trace and with
``compile: true``, ``torch.vmap`` over the whole model. It reproduces the sequential engine up to
floating-point reduction order (tests/engine checks both programs in float64); docs/PERFORMANCE.md,
"How the batched engine works".
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from fedmoo.data.federated import FederatedData
from fedmoo.engine.base import LocalSGD, Member
from fedmoo.engine.common import forward_stats, objective_losses, relabel
from fedmoo.engine.layout import ParamLayout
from fedmoo.engine.linear_head import LinearHead
from fedmoo.engine.lockstep import LockstepProgram
from fedmoo.engine.plan import make_plan
from fedmoo.engine.rowsgd import RowSGD, add_tensor
from fedmoo.engine.stacked import train_rows, train_steps
from fedmoo.engine.tasks import TaskRows, task_cohort
from fedmoo.errors import UserError
from fedmoo.params import set_flat
from fedmoo.state import ClientSpec, Cohort

log = logging.getLogger(__name__)

def unbatchable(model: nn.Module) -> str | None:
    """Why the batched engine cannot train ``model`` (None when it can): torch.vmap cannot batch
    recurrent layers over per-client weights, nor batch norm's running statistics."""
    for name, m in model.named_modules():
        norm = isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        if norm or isinstance(m, nn.RNNBase):
            return f"module {name or 'model'!r} is {type(m).__name__} (no per-client batching)"
    return None


class BatchedEngine:
    """``fedmoo.engine.base.StackingEngine``: trains ``model`` on ``data``'s clients with
    ``sgd``, the cohort's clients (or several runs' cohorts) stacked into one program."""

    choice: str | None = None   # set by fedmoo.engine.build when engine=auto chose it

    def __init__(self, model: nn.Module, data: FederatedData, sgd: LocalSGD,
                 compile: bool = False, program: str = "auto", cuda_graph: bool = False):
        reason = unbatchable(model)
        if reason is not None:
            raise UserError(f"engine=batched cannot train this model: {reason}; use "
                            "engine=sequential, or a model written with plain tensor ops "
                            "(hand-written LSTM cell, GroupNorm)")
        if compile and program == "lockstep":
            raise UserError("engine.compile=true runs the vmap program; "
                            "use engine.program=vmap or auto with it")
        if compile and cuda_graph:
            raise UserError("engine.compile=true and engine.cuda_graph=true cannot be combined; "
                            "choose one")
        self.model, self.data, self.sgd = model, data, sgd
        self.layout = ParamLayout(model)
        self._offsets = data.train.offsets.cpu()
        self._sizes = data.train.sizes.cpu()
        self._vloss = torch.vmap(self._client_loss, randomness="different")
        self._grad = torch.func.grad(self._total_loss, has_aux=True)
        device = next(model.parameters()).device
        self._token = torch.zeros((), device=device, requires_grad=True)  # joins fused layers to the graph
        self.compiled = compile
        self.program = None
        if not compile and program != "vmap":
            probe = data.x[data.train.index[:2]].to(next(model.parameters()).dtype)
            self.program = LockstepProgram.build(model, self.layout, probe)
            if self.program is None and program == "lockstep":
                raise UserError("engine.program=lockstep: torch.fx cannot trace this model (or "
                                "its traced program differs from the model); use engine.program=auto")
        self.head = None
        if self.program is not None and program == "auto":
            self.head = LinearHead.match(self.program, data.task)
        if cuda_graph and self.head is not None:
            raise UserError("engine.cuda_graph=true does not apply to the closed-form softmax "
                            "regression; set engine.program=lockstep to train it by autograd")
        self.cuda_graph = cuda_graph   # fedmoo.engine.graph: the round's steps from one CUDA graph
        self.graph_pool = None         # the graphs' memory pool, shared by every round's graph
        self._warned_tasks = False     # per-task rounds do not use the graph: said once
        if self.program is not None:   # (the closed-form head trains in fedmoo.engine.stacked)
            self._step = self._lockstep_step
        else:
            self._step = torch.compile(self._vmap_step, dynamic=False) if compile else self._vmap_step

    @property
    def name(self) -> str:
        if self.head is not None:
            return "batched (closed-form softmax regression)"
        graph = ", CUDA graph" if self.cuda_graph else ""
        if self.program is not None:
            return f"batched (lockstep program{graph})"
        return "batched (vmap program" + (", compiled" if self.compiled else "") + graph + ")"

    # -- the batched program ------------------------------------------------------------------
    def _client_loss(self, params: dict[str, Tensor], x: Tensor, y: Tensor, weight: Tensor,
                     task_weights: Tensor | None = None) -> Tensor:
        """One row's minibatch loss: the mean over its real samples (weights 1/b or 0); on
        multi-task data weighted over tasks by ``task_weights [S]`` (default: the task mean)."""
        out = functional_call(self.model, params, (x,))
        return (objective_losses(out, y, self.data.task, task_weights) * weight).sum()

    def _total_loss(self, views: tuple[Tensor, ...], x, y, weight, scale, task_weights=None):
        params = self.layout.params(list(views))
        rest = () if task_weights is None else (task_weights,)
        losses = self._vloss(params, x, y, weight, *rest)
        total = losses.sum() if scale is None else (losses * scale).sum()
        return total, losses

    def _vmap_step(self, rule: RowSGD, x: Tensor, y: Tensor, weight: Tensor,
                   scale: Tensor | None, task_weights: Tensor | None = None) -> Tensor:
        """One SGD step of every row, in place on ``rule.views``, with vmap over the whole model;
        returns the rows' minibatch losses."""
        grads, losses = self._grad(tuple(rule.views), x, y, weight, scale, task_weights)
        with torch.no_grad():
            for i, g in enumerate(grads):
                rule.apply(i, add_tensor(g))
        return losses.detach()

    def _lockstep_step(self, rule: RowSGD, x: Tensor, y: Tensor, weight: Tensor,
                       scale: Tensor | None, task_weights: Tensor | None = None) -> Tensor:
        """The same step through the lockstep program: the fused linear layers update
        themselves during the backward pass, the other parameters right after it."""
        out, leaves = self.program.forward(rule.views, x, rule, self._token)
        r, b = weight.shape
        tw = None if task_weights is None else task_weights.repeat_interleave(b, 0)
        losses = objective_losses(out.flatten(0, 1), y.flatten(0, 1), self.data.task, tw)
        losses = (losses.view(r, b) * weight).sum(1)
        total = losses.sum() if scale is None else (losses * scale).sum()
        total.backward()
        with torch.no_grad():
            for i, leaf in leaves.items():
                if leaf.grad is not None:   # as torch.optim.SGD: no gradient, no step at all
                    rule.apply(i, add_tensor(leaf.grad))
        return losses.detach()

    # -- one round ----------------------------------------------------------------------------
    def _before(self, ids: list[int], w: Tensor,
                label_map: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Mean loss, accuracy (%) and size of w on each cohort client's train set, one pass
        (``[K]``, or ``[K, S]`` per task on multi-task data)."""
        data, dev = self.data, w.device
        sizes = self._sizes[ids]
        pos = np.concatenate([np.arange(int(self._offsets[k]), int(self._offsets[k + 1]))
                              for k in ids])
        owner = torch.from_numpy(np.repeat(np.arange(len(ids)), sizes.numpy())).to(dev)
        samples = data.train.index[torch.from_numpy(pos).to(dev)]
        set_flat(self.model, w)
        targets = None if label_map is None else label_map[owner, data.y[samples]]
        loss, correct = forward_stats(self.model, data.x, data.y, samples, data.task,
                                      targets=targets)
        sums = torch.zeros(2, len(ids), *loss.shape[1:], dtype=w.dtype, device=dev)
        sums[0].index_add_(0, owner, loss.to(w.dtype))
        sums[1].index_add_(0, owner, correct.to(w.dtype))
        n = sizes.to(device=dev, dtype=w.dtype).view(-1, *(1,) * (loss.dim() - 1))
        return sums[0] / n, 100.0 * sums[1] / n, n.flatten()

    def _trained(self, ids: list[int], flat: Tensor,
                 label_map: Tensor | None) -> tuple[Tensor, Tensor]:
        """Mean loss and accuracy (%) of each client's trained model (``flat [K, d]``) on its
        whole training set (``ClientSpec.eval_trained``), one client at a time as the
        sequential engine measures them."""
        data = self.data
        out = torch.zeros(2, len(ids), dtype=flat.dtype, device=flat.device)
        for i, k in enumerate(ids):
            idx = data.train.of(k)
            set_flat(self.model, flat[i])
            targets = None if label_map is None else relabel(label_map[i], data.y[idx])
            loss, correct = forward_stats(self.model, data.x, data.y, idx, data.task,
                                          targets=targets)
            out[0, i], out[1, i] = loss.mean(), 100.0 * correct.mean()
        return out[0], out[1]

    def _train_tasks(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        """Per-task training: the (client, task) pairs are the R rows of the stacked copies."""
        data, layout, tt, sgd = self.data, self.layout, spec.task_training, self.sgd
        rows = TaskRows.build(self.model, data, client_ids, spec, w)
        if self.cuda_graph and not self._warned_tasks:
            self._warned_tasks = True
            log.warning("engine.cuda_graph=true: per-task training (FMGDA / FSMGDA rounds) runs "
                        "its steps without a CUDA graph")
        ids = client_ids.tolist()
        dev, dtype = w.device, w.dtype
        loss_before, acc_before, num_samples = self._before(ids, w, None)
        if rows.count == 0:
            return task_cohort(rows, client_ids, w, w[None], sgd.lr, loss_before, acc_before,
                               torch.zeros(0, dtype=dtype, device=dev), num_samples)
        row_clients = [ids[i] for i in rows.client.tolist()]
        plan = make_plan(row_clients, self._offsets, self._sizes,
                         None if tt.full_batch else sgd.batch_size, 1, tt.local_steps,
                         torch.Generator().manual_seed(seed), data.train.index, dtype)
        views = layout.pack(w, layout.empty(rows.count, w))
        bufs = [torch.zeros_like(v) for v in views] if sgd.momentum else None
        scale = None
        if spec.loss_scale is not None:
            scale = spec.loss_scale.to(device=dev, dtype=dtype).reshape(-1)[rows.client]
        rule = RowSGD(views, bufs, None, sgd.lr, None, sgd.momentum or None, sgd.weight_decay)
        self.model.train()
        loss_after = train_steps(self, rule, plan, None, scale, rows.weights)
        return task_cohort(rows, client_ids, w, layout.unpack(views), sgd.lr, loss_before,
                           acc_before, loss_after, num_samples)

    def train(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        return self.train_many([Member(self, client_ids, w, spec, seed)])[0]

    def train_many(self, members: list[Member]) -> list[Cohort]:
        """Train the cohorts of several runs in one program (fedmoo.engine.stacked): each
        member brings its run's engine, which must share this engine's model architecture and
        sample tensors. Per-task training (FMGDA, FSMGDA) trains each such member on its own.
        Each member's numbers are those of its run alone (``train_rows``)."""
        out = {i: m.engine._train_tasks(m.ids, m.w, m.spec, m.seed)
               for i, m in enumerate(members) if m.spec.task_training is not None}
        rows = [i for i in range(len(members)) if i not in out]
        out.update(zip(rows, train_rows(self, [members[i] for i in rows])))
        return [out[i] for i in range(len(members))]
