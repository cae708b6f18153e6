"""Local training of one or several runs' cohorts as one stack of rows.

A row is one client copy being trained (client k of run r, and Ditto's personal copy beside it)
with its own run's global model, minibatch plan, SGD settings, loss scale and label map. Rows
share each kernel only along its batch dimension (or, in the closed form's large steps, along M
of one product a source, which keeps each row's bits: ``linear_head``), so a run's numbers are
its numbers alone bit for bit (``fedmoo.run.group`` and ``hydra/launcher=lockstep`` train a whole sweep at once this
way). The group's ``engine`` supplies the program and the sample tensors, which every member
shares with the model architecture (the caller checks); each ``Member`` brings its run's engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from fedmoo.engine.base import Member
from fedmoo.engine.common import entrywise, gather, relabel
from fedmoo.engine.linear_head import RowOrder
from fedmoo.engine.graph import train_steps_graphed
from fedmoo.engine.plan import RoundPlan, longest_first, make_plan, stack_plans
from fedmoo.engine.rowsgd import Rows, RowSGD
from fedmoo.state import Cohort

# Rows of one source (runs of one seed and partition, Ditto's personal rows) whose step inputs
# take at least this much read one gathered copy (full batches); smaller minibatches are
# gathered row by row.
REUSE_BYTES = 1 << 20


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


def _rows(values: list[tuple[float, int]], like: Tensor, optional: bool = False) -> Rows | None:
    """A hyperparameter given as (value, number of rows) runs: a number when every row has the
    same value, else one value per row ``[R]``; None for an ``optional`` term that every row
    has off (0)."""
    if optional and all(v == 0 for v, _ in values):
        return None
    if len({v for v, _ in values}) == 1:
        return float(values[0][0])
    return torch.tensor([v for v, n in values for _ in range(n)], dtype=like.dtype).to(like.device)


def train_rows(engine, members: list[Member]) -> list[Cohort]:
    """Train every member's cohort (no per-task training) as stacks of rows; one Cohort per
    member. Rows are stacked along the batch dimension of the products (the closed form's
    large steps: along M, ``linear_head``), so members train in classes of equal arithmetic
    (``_arithmetic``), one stack each, and a row's products keep the bits they have alone."""
    classes: dict[tuple, list[int]] = {}
    for i, m in enumerate(members):
        classes.setdefault(_arithmetic(engine, m), []).append(i)
    out: dict[int, Cohort] = {}
    for rows in classes.values():
        out.update(zip(rows, _train_stack(engine, [members[i] for i in rows])))
    return [out[i] for i in range(len(members))]


def _arithmetic(engine, m: Member) -> tuple:
    """What decides a row's arithmetic besides its own numbers: its batch width (the padded
    ``B`` of its products), whether the closed form's first step measures the loss before
    training, and which terms of the update are on (one that is off takes a shorter path)."""
    e, sgd = m.engine, m.engine.sgd
    sizes = e._sizes[m.ids.cpu()]
    n = int(sizes.max()) if sizes.numel() else 0
    bs = sgd.batch_size
    width = n if not bs or bs <= 0 or bs > n else int(bs)
    mu = m.spec.prox_mu != 0 or (m.spec.personal is not None and m.spec.personal_lam != 0)
    return width, _measures_first(engine, [m]), sgd.momentum != 0, mu, sgd.weight_decay != 0


@dataclass
class _Stack:
    """One class's rows: where each member's rows sit, the round's plan with one row per
    source (``base``; runs of one seed and partition share a source), each row's source, the
    rows' update rule, label maps ``[R, C]`` and loss factors ``[R]`` (or None)."""

    members: list[Member]
    blocks: list[_Block]
    base: RoundPlan
    sources: list[int]
    rule: RowSGD
    label_map: Tensor | None
    scale: Tensor | None
    label_maps: list[Tensor | None]   # each member's own

    @property
    def total(self) -> int:
        return len(self.sources)

    def row_plan(self) -> RoundPlan:
        """The plan with one row per stacked row."""
        return self.base.take(torch.tensor(self.sources, device=self.base.index.device))


def _train_stack(engine, members: list[Member]) -> list[Cohort]:
    """``train_rows`` of one class's ``members`` as one stack."""
    stack = _stack(engine, members)
    first = _measures_first(engine, members)
    like = stack.rule.views[0]
    befores = None if first else [_before(m, lm, like)
                                  for m, lm in zip(members, stack.label_maps)]
    engine.model.train()
    if engine.head is not None:   # closed form (fedmoo.engine.linear_head)
        loss_after, measured = _train_closed_form(engine, stack, first)
    elif engine.cuda_graph:
        loss_after = train_steps_graphed(engine, stack.row_plan(), stack, capture=like.is_cuda)
    else:
        with entrywise(stack.total, like.device):
            loss_after = train_steps(engine, stack.rule, stack.row_plan(), stack.label_map,
                                     stack.scale)
    if first:                     # measured with the first step
        befores = [_before(m, None, like, (measured[0][b.rows], measured[1][b.rows]))
                   for m, b in zip(members, stack.blocks)]
    return _cohorts(engine, stack, loss_after, befores)


def _stack(engine, members: list[Member]) -> _Stack:
    """The members' rows, plans and settings stacked; the rows' views hold their start models."""
    layout, w0 = engine.layout, members[0].w
    blocks, plans, sources, start = [], [], [], 0
    made: dict[tuple, int] = {}   # runs of one seed and partition share their plans
    for m in members:
        e, sgd = m.engine, m.engine.sgd
        block = _Block(start, len(m.ids), m.spec.personal is not None)
        key = (e.data.train.digest, tuple(m.ids.tolist()), m.seed, sgd.batch_size, sgd.epochs,
               sgd.local_steps)
        if key not in made:
            made[key] = sum(len(p.index) for p in plans)   # the plan's first source
            plans.append(make_plan(list(key[1]), e._offsets, e._sizes, sgd.batch_size,
                                   sgd.epochs, sgd.local_steps,
                                   torch.Generator().manual_seed(m.seed), e.data.train.index,
                                   w0.dtype))
        first = range(made[key], made[key] + block.k)  # personal rows: the same minibatches
        sources += [*first, *first] if block.ditto else first
        blocks.append(block)
        start += block.size
    dev, dtype, y_dev = w0.device, w0.dtype, engine.data.y.device
    label_maps = [None if m.spec.label_map is None else m.spec.label_map.to(y_dev)
                  for m in members]
    classes = next((lm.shape[1] for lm in label_maps if lm is not None), 0)
    scales = [None if m.spec.loss_scale is None
              else m.spec.loss_scale.to(device=dev, dtype=dtype).reshape(b.k)
              for m, b in zip(members, blocks)]
    return _Stack(members, blocks, stack_plans(plans), sources,
                  _rule(layout, members, blocks, start),
                  _per_block(label_maps, blocks,    # label flipping; others: identity rows
                             lambda k: torch.arange(classes, device=y_dev).expand(k, classes)),
                  _per_block(scales, blocks,        # loss scaling; others: 1
                             lambda k: torch.ones(k, dtype=dtype, device=dev)),
                  label_maps)


def _rule(layout, members: list[Member], blocks: list[_Block], total: int) -> RowSGD:
    """The rows' update rule: their views (each row's start model: the run's global model, or
    the client's personal model for Ditto's personal rows), momentum buffers, anchors and
    per-row settings."""
    w0 = members[0].w
    dev, dtype = w0.device, w0.dtype

    def per_row(glob, personal=None) -> list[tuple[float, int]]:
        out = []
        for m, b in zip(members, blocks):
            out.append((float(glob(m)), b.k))
            if b.ditto:
                out.append((float((personal or glob)(m)), b.k))
        return out

    lr = _rows(per_row(lambda m: m.engine.sgd.lr), w0)
    mu = _rows(per_row(lambda m: m.spec.prox_mu, lambda m: m.spec.personal_lam), w0, True)
    momentum = _rows(per_row(lambda m: m.engine.sgd.momentum, lambda m: 0.0), w0, True)
    wd = _rows(per_row(lambda m: m.engine.sgd.weight_decay), w0)
    views = layout.empty(total, w0)
    one = len(members) == 1
    anchor = None if mu is None else layout.empty(1 if one else total, w0)
    for m, b in zip(members, blocks):
        layout.pack(m.w, views, b.rows)
        if b.ditto:
            layout.pack(m.spec.personal.to(device=dev, dtype=dtype), views, b.personal)
        if anchor is not None:
            layout.pack(m.w, anchor, slice(0, 1) if one else slice(b.start, b.start + b.size))
    bufs = [torch.zeros_like(v) for v in views] if momentum is not None else None
    return RowSGD(views, bufs, anchor, lr, mu, momentum, wd)


def _measures_first(engine, members: list[Member]) -> bool:
    """Full batches with the closed form: the first step measures the loss before training."""
    return engine.head is not None and engine.data.num_tasks == 0 and all(
        m.engine.sgd.batch_size is None and bool((m.engine._sizes[m.ids.cpu()] > 0).all())
        for m in members)


def _train_closed_form(engine, stack: _Stack, first: bool
                       ) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
    """``LinearHead.train`` of the stack's rows, one by one, longest first; where the rows of
    each source read large full batches (``_reuse``), each source's inputs are gathered once."""
    data, total = engine.data, stack.total
    src = torch.tensor(stack.sources, device=stack.base.index.device)
    reuse = _reuse(stack.base, src, data.x)
    if reuse > 1:
        plan, src = longest_first(stack.base, src)
        row = torch.empty_like(src)
        row[torch.argsort(src, stable=True)] = torch.arange(total, device=src.device)
        src = row
    else:
        plan, src = longest_first(stack.row_plan(), torch.arange(total, device=src.device))
    return engine.head.train(RowOrder.build(src, stack.label_map, stack.scale), plan, data.x,
                             data.y, stack.rule, before=first, reuse=reuse)


def train_steps(engine, rule: RowSGD, plan: RoundPlan, label_map: Tensor | None,
                scale: Tensor | None, task_weights: Tensor | None = None) -> Tensor:
    """Every step of ``plan`` through the engine's program, one step at a time; returns the
    rows' losses over their last epoch ``[R]`` (also the per-task rows' loop)."""
    data, lr, like = engine.data, rule.lr, rule.views[0]
    lr_plan = (lr if isinstance(lr, float) else lr.view(-1, 1)) * plan.active
    loss_after = torch.zeros(plan.index.shape[0], dtype=like.dtype, device=like.device)
    for s in range(plan.steps):
        idx, weight = plan.index[:, s], plan.weight[:, s]
        step = replace(rule, lr=lr if isinstance(lr, float) and plan.full[s] else lr_plan[:, s])
        x, y = gather(data.x, idx), relabel(label_map, gather(data.y, idx))
        loss_after += engine._step(step, x, y, weight, scale, task_weights) * plan.last[:, s]
    return loss_after


def _cohorts(engine, stack: _Stack, loss_after: Tensor, befores: list) -> list[Cohort]:
    """Each member's Cohort from the trained rows."""
    layout, views = engine.layout, stack.rule.views
    out = []
    for m, b, lm, (loss_before, acc_before, num_samples) in zip(
            stack.members, stack.blocks, stack.label_maps, befores):
        if loss_before is not None and loss_before.dim() == 2:   # multi-task data: task mean
            loss_before, acc_before = loss_before.mean(1), acc_before.mean(1)
        trained = (m.engine._trained(m.ids.tolist(), layout.unpack(views, b.rows), lm)
                   if m.spec.eval_trained else (None, None))
        out.append(Cohort(
            client_ids=m.ids, deltas=layout.deltas(m.w, views, b.rows),
            num_samples=num_samples, loss_before=loss_before, loss_after=loss_after[b.rows],
            acc_before=acc_before, local_lr=m.engine.sgd.lr,
            personal=layout.unpack(views, b.personal) if b.ditto else None,
            loss_trained=trained[0], acc_trained=trained[1],
        ))
    return out


def _reuse(base: RoundPlan, src: Tensor, x: Tensor) -> int:
    """G when every source of the stack has G > 1 rows and a step's inputs of a source take at
    least REUSE_BYTES (its G rows then read one gathered copy), else 1 (each row gathers its
    own inputs: one kernel for all rows, cheaper for small minibatches)."""
    counts = torch.bincount(src)
    g = int(counts[0])
    per_step = int(base.index.shape[2]) * math.prod(x.shape[1:]) * x.element_size()
    if g < 2 or bool((counts != g).any()) or per_step < REUSE_BYTES:
        return 1
    return g


def _before(m: Member, label_map: Tensor | None, like: Tensor,
            measured: tuple[Tensor, Tensor] | None = None
            ) -> tuple[Tensor | None, Tensor | None, Tensor]:
    """``m``'s ``_before`` (loss, accuracy and size of its global model on its cohort's
    training sets), or the ``measured`` loss and accuracy; only the sizes, the others None,
    where ``spec.measure_before`` is false."""
    if m.spec.measure_before and measured is None:
        return m.engine._before(m.ids.tolist(), m.w, label_map)
    sizes = m.engine._sizes[m.ids.cpu()].to(device=like.device, dtype=like.dtype)
    return (*measured, sizes) if m.spec.measure_before else (None, None, sizes)


def _per_block(values: list[Tensor | None], blocks: list[_Block], default) -> Tensor | None:
    """Each member's per-client values ``[k, ...]`` (``default(k)`` for a member without) as
    rows of the stack, Ditto's personal rows repeating their client's; None when no member has
    any."""
    if all(v is None for v in values):
        return None
    values = [default(b.k) if v is None else v for v, b in zip(values, blocks)]
    return torch.cat([v for v, b in zip(values, blocks) for v in ([v, v] if b.ditto else [v])])
