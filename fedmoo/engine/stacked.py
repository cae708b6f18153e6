"""Local training of one or several runs' cohorts as one stack of rows.

A row is one client copy being trained: client k of run r (and, for Ditto, k's personal copy
beside it). The batched engine trains one run's cohort as K rows; ``train_rows`` trains the
cohorts of several runs in the same program, each row with its own run's global model, minibatch
plan (the run's partition, seed, batch size, epochs or local steps), learning rate, momentum,
weight decay, proximal weight, loss scale and label map. Rows of one run see exactly what they
would see alone: the per-row arithmetic is the same, only more rows share each kernel
(``fedmoo.run.group`` and ``hydra/launcher=lockstep`` use this to train a whole sweep at once).

The group's ``engine`` supplies the program (model graph and layout) and the sample tensors;
each ``Member`` brings the run's own engine, whose partition and client settings apply to its
rows. All members must share the model architecture and the sample tensors (the caller checks).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.engine.common import gather, relabel
from fedmoo.engine.plan import RoundPlan, make_plan, stack_plans
from fedmoo.engine.rowsgd import Rows, RowSGD
from fedmoo.state import ClientSpec, Cohort


@dataclass
class Member:
    """One run's request for a round: its engine, cohort ``ids``, global model ``w`` [d], the
    algorithm's client spec and the round's seed."""

    engine: object
    ids: Tensor
    w: Tensor
    spec: ClientSpec
    seed: int


@dataclass
class _Block:
    """Where a member's rows sit in the stack: ``k`` global rows from ``start``, then ``k``
    personal rows when ``ditto``."""

    start: int
    k: int
    ditto: bool

    @property
    def size(self) -> int:
        return 2 * self.k if self.ditto else self.k

    @property
    def rows(self) -> slice:
        return slice(self.start, self.start + self.k)

    @property
    def personal(self) -> slice:
        return slice(self.start + self.k, self.start + 2 * self.k)


def _rows(values: list[tuple[float, int]], like: Tensor) -> Rows:
    """A hyperparameter given as (value, number of rows) runs: a number when every row has the
    same value, else one value per row ``[R]``."""
    if len({v for v, _ in values}) == 1:
        return float(values[0][0])
    return torch.tensor([v for v, n in values for _ in range(n)], dtype=like.dtype).to(like.device)


def _partition_key(engine) -> bytes:
    """A digest of the engine's training split (computed once per engine): two runs whose
    splits have the same digest draw the same minibatches from the same seed."""
    key = getattr(engine, "_partition_digest", None)
    if key is None:
        h = hashlib.sha256(engine._offsets.numpy().tobytes())
        h.update(engine.data.train.index.cpu().numpy().tobytes())
        key = engine._partition_digest = h.digest()
    return key


def _rows_or_none(values: list[tuple[float, int]], like: Tensor) -> Rows | None:
    """``_rows``, or None when every row's value is 0 (the term is off)."""
    return None if all(v == 0 for v, _ in values) else _rows(values, like)


def train_rows(engine, members: list[Member]) -> list[Cohort]:
    """Train every member's cohort (no per-task training) as one stack; one Cohort per member."""
    layout, data = engine.layout, engine.data
    w0 = members[0].w
    dev, dtype = w0.device, w0.dtype
    blocks, plans, start = [], [], 0
    made: dict[tuple, RoundPlan] = {}   # runs of one seed and partition share their plans
    for m in members:
        layout.numel_check(m.w.numel())
        e = m.engine
        block = _Block(start, len(m.ids), m.spec.personal is not None)
        key = (_partition_key(e), tuple(m.ids.tolist()), m.seed, e.batch_size, e.epochs,
               e.local_steps)
        if key not in made:
            made[key] = make_plan(list(key[1]), e._offsets, e._sizes, e.batch_size, e.epochs,
                                  e.local_steps, torch.Generator().manual_seed(m.seed),
                                  e.data.train.index, dtype)
        plan = made[key]
        plans += [plan, plan] if block.ditto else [plan]   # personal rows: the same minibatches
        blocks.append(block)
        start += block.size
    plan = stack_plans(plans)
    total = start

    def per_row(glob, personal) -> list[tuple[float, int]]:
        out = []
        for m, b in zip(members, blocks):
            out.append((float(glob(m)), b.k))
            if b.ditto:
                out.append((float(personal(m)), b.k))
        return out

    lr = _rows(per_row(lambda m: m.engine.lr, lambda m: m.engine.lr), w0)
    mu = _rows_or_none(per_row(lambda m: m.spec.prox_mu, lambda m: m.spec.personal_lam), w0)
    momentum = _rows_or_none(per_row(lambda m: m.engine.momentum, lambda m: 0.0), w0)
    wd = _rows(per_row(lambda m: m.engine.weight_decay, lambda m: m.engine.weight_decay), w0)

    views = layout.empty(total, w0)
    anchor = None
    if mu is not None:
        anchor = layout.empty(1 if len(members) == 1 else total, w0)
    for m, b in zip(members, blocks):
        layout.pack(m.w, views, b.rows)
        if b.ditto:
            layout.pack(m.spec.personal.to(device=dev, dtype=dtype), views, b.personal)
        if anchor is not None:
            layout.pack(m.w, anchor, slice(0, 1) if len(members) == 1
                        else slice(b.start, b.start + b.size))
    bufs = [torch.zeros_like(v) for v in views] if momentum is not None else None
    scale = _stack_scale(members, blocks, dev, dtype)
    label_maps = [None if m.spec.label_map is None else m.spec.label_map.to(data.y.device)
                  for m in members]
    label_map = _stack_label_maps(label_maps, blocks, data)

    befores = [m.engine._before(m.ids.tolist(), m.w, lm) for m, lm in zip(members, label_maps)]
    lr_plan = (lr if isinstance(lr, float) else lr.view(-1, 1)) * plan.active
    loss_after = torch.zeros(total, dtype=dtype, device=dev)
    engine.model.train()
    for s in range(plan.steps):
        idx, weight = plan.index[:, s], plan.weight[:, s]
        x, y = gather(data.x, idx), relabel(label_map, gather(data.y, idx))
        step_lr = lr if isinstance(lr, float) and plan.full[s] else lr_plan[:, s]
        rule = RowSGD(views, bufs, anchor, step_lr, mu, momentum, wd)
        losses = engine._step(rule, x, y, weight, scale)
        loss_after += losses * plan.last[:, s]

    out = []
    for m, b, lm, (loss_before, acc_before, num_samples) in zip(members, blocks, label_maps,
                                                                 befores):
        if loss_before.dim() == 2:                     # multi-task data: mean over the tasks
            loss_before, acc_before = loss_before.mean(1), acc_before.mean(1)
        trained = (m.engine._trained(m.ids.tolist(), layout.unpack(views, b.rows), lm)
                   if m.spec.eval_trained else (None, None))
        out.append(Cohort(
            client_ids=m.ids, deltas=layout.deltas(m.w, views, b.rows),
            num_samples=num_samples, loss_before=loss_before, loss_after=loss_after[b.rows],
            acc_before=acc_before, local_lr=m.engine.lr,
            personal=layout.unpack(views, b.personal) if b.ditto else None,
            loss_trained=trained[0], acc_trained=trained[1],
        ))
    return out


def _stack_scale(members: list[Member], blocks: list[_Block], dev, dtype) -> Tensor | None:
    """Per-row loss factors (loss-scaling attack), None when no member scales."""
    if all(m.spec.loss_scale is None for m in members):
        return None
    parts = []
    for m, b in zip(members, blocks):
        s = (torch.ones(b.k, dtype=dtype, device=dev) if m.spec.loss_scale is None
             else m.spec.loss_scale.to(device=dev, dtype=dtype).reshape(b.k))
        parts += [s, s] if b.ditto else [s]
    return torch.cat(parts)


def _stack_label_maps(maps: list[Tensor | None], blocks: list[_Block], data) -> Tensor | None:
    """Per-row label maps ``[R, C]`` (label-flipping attack; identity rows for the members
    without one), None when no member relabels."""
    given = [lm for lm in maps if lm is not None]
    if not given:
        return None
    if len(maps) == 1:
        return torch.cat([given[0], given[0]]) if blocks[0].ditto else given[0]
    width = int(given[0].shape[1])   # the data's classes: the same for every member
    identity = torch.arange(width, device=given[0].device)
    parts = []
    for lm, b in zip(maps, blocks):
        lm = identity.expand(b.k, width) if lm is None else lm
        parts += [lm, lm] if b.ditto else [lm]
    return torch.cat(parts)
