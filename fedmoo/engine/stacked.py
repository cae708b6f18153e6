"""Local training of one or several runs' cohorts as one stack of rows.

A row is one client copy being trained: client k of run r (and, for Ditto, k's personal copy
beside it). The batched engine trains one run's cohort as K rows; ``train_rows`` trains the
cohorts of several runs in the same program, each row with its own run's global model, minibatch
plan (the run's partition, seed, batch size, epochs or local steps), learning rate, momentum,
weight decay, proximal weight, loss scale and label map. Rows of one run see exactly what they
would see alone: by default (``invariant``) each row's products keep the shapes they have alone,
only more rows share each kernel along its batch dimension, so a run's numbers are its numbers
alone bit for bit (``fedmoo.run.group`` and ``hydra/launcher=lockstep`` use this to train a
whole sweep at once).

The group's ``engine`` supplies the program (model graph and layout) and the sample tensors;
each ``Member`` brings the run's own engine, whose partition and client settings apply to its
rows. All members must share the model architecture and the sample tensors (the caller checks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.engine.base import Member
from fedmoo.engine.common import entrywise, eval_chunk, gather, relabel
from fedmoo.engine.linear_head import Sharing
from fedmoo.engine.graph import train_steps_graphed
from fedmoo.engine.plan import RoundPlan, longest_first, make_plan, stack_plans
from fedmoo.engine.rowsgd import Rows, RowSGD
from fedmoo.state import Cohort

# Rows that read the same samples (runs of one seed and partition, Ditto's personal rows) share
# their inputs with the closed-form head: each source's samples are gathered and multiplied once
# (``invariant=False`` only).
SHARED_INPUTS = True
# With the invariant arithmetic, rows of one source whose step inputs take at least this much
# read one gathered copy (full batches); smaller minibatches are gathered row by row.
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


def _rows(values: list[tuple[float, int]], like: Tensor) -> Rows:
    """A hyperparameter given as (value, number of rows) runs: a number when every row has the
    same value, else one value per row ``[R]``."""
    if len({v for v, _ in values}) == 1:
        return float(values[0][0])
    return torch.tensor([v for v, n in values for _ in range(n)], dtype=like.dtype).to(like.device)


def _rows_or_none(values: list[tuple[float, int]], like: Tensor) -> Rows | None:
    """``_rows``, or None when every row's value is 0 (the term is off)."""
    return None if all(v == 0 for v, _ in values) else _rows(values, like)


def train_rows(engine, members: list[Member], invariant: bool = True) -> list[Cohort]:
    """Train every member's cohort (no per-task training) as one stack; one Cohort per member.

    ``invariant`` (the default): every row's arithmetic is that of its run trained alone, bit
    for bit, whatever the other members. Rows are stacked only along the batch dimension of
    the products (each entry is the row's own ``[B, in] x [in, out]``, computed as alone), so
    members are trained in classes of equal arithmetic (``_arithmetic``: the same batch width,
    the same terms of the update), and no inputs are shared between runs. ``invariant=False``
    stacks every member at once, padded to the widest batch, and lets runs of one seed share
    their inputs (``SHARED_INPUTS``: wider GEMMs, faster for full batches): each run's numbers
    then move with the group's members by float rounding."""
    if not invariant:
        return _train_stack(engine, members, SHARED_INPUTS)
    classes: dict[tuple, list[int]] = {}
    for i, m in enumerate(members):
        classes.setdefault(_arithmetic(engine, m), []).append(i)
    out: list[Cohort | None] = [None] * len(members)
    for rows in classes.values():
        for i, c in zip(rows, _train_stack(engine, [members[i] for i in rows], False)):
            out[i] = c
    return out   # type: ignore[return-value]


def _arithmetic(engine, m: Member) -> tuple:
    """What decides a row's arithmetic besides its own numbers: its batch width (the padded
    ``B`` of its products and sums), whether the closed form measures the loss before training
    with the first step (full batches), and which terms of the update are on (momentum, the
    proximal term, weight decay: a term that is off takes a shorter path)."""
    e, sgd = m.engine, m.engine.sgd
    sizes = e._sizes[m.ids.cpu()]
    n = int(sizes.max()) if sizes.numel() else 0
    bs = sgd.batch_size
    width = n if not bs or bs <= 0 or bs > n else int(bs)
    full = sgd.batch_size is None and bool((sizes > 0).all())
    mu = m.spec.prox_mu != 0 or (m.spec.personal is not None and m.spec.personal_lam != 0)
    return (width, full and engine.head is not None, sgd.momentum != 0, bool(mu),
            sgd.weight_decay != 0)


def _train_stack(engine, members: list[Member], shared: bool) -> list[Cohort]:
    """``train_rows`` of ``members`` as one stack (rows of one seed and partition sharing their
    inputs when ``shared``)."""
    layout, data = engine.layout, engine.data
    w0 = members[0].w
    dev, dtype = w0.device, w0.dtype
    blocks, plans, sources, start = [], [], [], 0
    made: dict[tuple, int] = {}   # runs of one seed and partition share their plans
    for m in members:
        layout.numel_check(m.w.numel())
        e, sgd = m.engine, m.engine.sgd
        block = _Block(start, len(m.ids), m.spec.personal is not None)
        key = (e.data.train.digest, tuple(m.ids.tolist()), m.seed, sgd.batch_size, sgd.epochs,
               sgd.local_steps)
        if key not in made:
            made[key] = sum(len(p.index) for p in plans)   # the plan's first source
            plans.append(make_plan(list(key[1]), e._offsets, e._sizes, sgd.batch_size,
                                   sgd.epochs, sgd.local_steps,
                                   torch.Generator().manual_seed(m.seed), e.data.train.index,
                                   dtype))
        first = range(made[key], made[key] + block.k)  # personal rows: the same minibatches
        sources += [*first, *first] if block.ditto else first
        blocks.append(block)
        start += block.size
    base = stack_plans(plans)                          # one row per source
    src = torch.tensor(sources, device=base.index.device)
    total = start
    shared = shared and engine.head is not None

    def per_row(glob, personal) -> list[tuple[float, int]]:
        out = []
        for m, b in zip(members, blocks):
            out.append((float(glob(m)), b.k))
            if b.ditto:
                out.append((float(personal(m)), b.k))
        return out

    lr = _rows(per_row(lambda m: m.engine.sgd.lr, lambda m: m.engine.sgd.lr), w0)
    mu = _rows_or_none(per_row(lambda m: m.spec.prox_mu, lambda m: m.spec.personal_lam), w0)
    momentum = _rows_or_none(per_row(lambda m: m.engine.sgd.momentum, lambda m: 0.0), w0)
    wd = _rows(per_row(lambda m: m.engine.sgd.weight_decay, lambda m: m.engine.sgd.weight_decay),
               w0)

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
    label_map = _stack_label_maps(label_maps, blocks)

    # full batches with the closed form: the first step measures the loss before training
    first = engine.head is not None and data.num_tasks == 0 and all(
        m.engine.sgd.batch_size is None and bool((m.engine._sizes[m.ids.cpu()] > 0).all())
        for m in members)
    befores = None if first else _befores(engine, members, blocks, views, label_maps, shared)
    engine.model.train()
    if engine.head is not None:   # closed form (fedmoo.engine.linear_head)
        sharing = shared and len(base.index) < total and Sharing.even(src)
        reuse = 1 if shared else _reuse(base, src, data.x)
        if reuse > 1:                # rows one by one, each source's inputs gathered once
            plan, src = longest_first(base, src)
            row = torch.empty_like(src)
            row[torch.argsort(src, stable=True)] = torch.arange(total, device=src.device)
            src = row
        else:
            if not sharing:          # rows one by one
                if sources != list(range(total)):
                    base = _row_plan(base, src)
                src = torch.arange(total, device=src.device)
            plan, src = longest_first(base, src)
        share = Sharing.build(src, label_map, scale)
        assert share is not None
        loss_after, measured = engine.head.train(share, plan, data.x, data.y,
                                                 RowSGD(views, bufs, anchor, lr, mu, momentum, wd),
                                                 before=first, reuse=reuse)
        if measured is not None:     # measured with the first step; given where asked for
            befores = [(measured[0][b.rows], measured[1][b.rows], _cohort_sizes(m, dev, dtype))
                       if m.spec.measure_before else (None, None, _cohort_sizes(m, dev, dtype))
                       for m, b in zip(members, blocks)]
    else:
        loss_after = _train_steps(engine, views, bufs, anchor, base, src, sources, total,
                                  label_map, scale, lr, mu, momentum, wd)

    out = []
    trained_all = _trained(engine, members, blocks, views, label_maps, shared)
    for m, b, trained, (loss_before, acc_before, num_samples) in zip(members, blocks,
                                                                      trained_all, befores):
        if loss_before is not None and loss_before.dim() == 2:   # multi-task data: task mean
            loss_before, acc_before = loss_before.mean(1), acc_before.mean(1)
        out.append(Cohort(
            client_ids=m.ids, deltas=layout.deltas(m.w, views, b.rows),
            num_samples=num_samples, loss_before=loss_before, loss_after=loss_after[b.rows],
            acc_before=acc_before, local_lr=m.engine.sgd.lr,
            personal=layout.unpack(views, b.personal) if b.ditto else None,
            loss_trained=trained[0], acc_trained=trained[1],
        ))
    return out


def _train_steps(engine, views, bufs, anchor, base: RoundPlan, src: Tensor, sources: list[int],
                 total: int, label_map: Tensor | None, scale: Tensor | None, lr: Rows,
                 mu: Rows | None, momentum: Rows | None, wd: Rows) -> Tensor:
    """Every step of the round for models without the closed form: each row gathers its own
    minibatch and the engine's program (lockstep or vmap) takes the step; returns the rows'
    losses over their last epoch ``[R]``."""
    data, dtype = engine.data, views[0].dtype
    plan = base if sources == list(range(total)) else _row_plan(base, src)
    if engine.cuda_graph:
        return train_steps_graphed(engine, views, bufs, anchor, plan, label_map, scale, lr, mu,
                                   momentum, wd, capture=views[0].is_cuda)
    lr_plan = (lr if isinstance(lr, float) else lr.view(-1, 1)) * plan.active
    loss_after = torch.zeros(total, dtype=dtype, device=views[0].device)
    with entrywise(total, views[0].device):
        for s in range(plan.steps):
            idx, weight = plan.index[:, s], plan.weight[:, s]
            step_lr = lr if isinstance(lr, float) and plan.full[s] else lr_plan[:, s]
            rule = RowSGD(views, bufs, anchor, step_lr, mu, momentum, wd)
            x, y = gather(data.x, idx), relabel(label_map, gather(data.y, idx))
            loss_after += engine._step(rule, x, y, weight, scale) * plan.last[:, s]
    return loss_after


def _reuse(base: RoundPlan, src: Tensor, x: Tensor) -> int:
    """Rows per source when every source of the stack has the same number G > 1 of rows and a
    step's inputs of a source take at least REUSE_BYTES (then its G rows read one gathered copy,
    ``LinearHead.train``'s ``reuse``), else 1 (each row gathers its own inputs: one kernel for
    all rows, cheaper for small minibatches)."""
    counts = torch.bincount(src)
    g = int(counts[0])
    per_step = int(base.index.shape[2]) * math.prod(x.shape[1:]) * x.element_size()
    if g < 2 or bool((counts != g).any()) or per_step < REUSE_BYTES:
        return 1
    return g


def _row_plan(base: RoundPlan, src: Tensor) -> RoundPlan:
    """The plan with one row per stacked row (row r is source ``src[r]`` of ``base``)."""
    return RoundPlan(index=base.index[src], weight=base.weight[src], active=base.active[src],
                     last=base.last[src], full=base.full)


def _befores(engine, members: list[Member], blocks: list[_Block], views: list[Tensor],
             label_maps: list[Tensor | None], shared: bool) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Each member's ``_before`` (loss, accuracy and size of its global model on its cohort's
    training sets; only the sizes, the others None, where ``spec.measure_before`` is false).
    With the closed-form head, members of one partition and cohort are measured together: each
    sample is read once for all their models (``LinearHead.stats``)."""
    out: list = [None] * len(members)
    together: dict[object, list[int]] = {}
    for i, m in enumerate(members):
        if not m.spec.measure_before:
            out[i] = (None, None, _cohort_sizes(m, views[0].device, views[0].dtype))
            continue
        key = (m.engine.data.train.digest, tuple(m.ids.tolist())) if shared else i
        together.setdefault(key, []).append(i)
    for group in together.values():
        if len(group) == 1:
            m = members[group[0]]
            out[group[0]] = m.engine._before(m.ids.tolist(), m.w, label_maps[group[0]])
            continue
        head = engine.head
        rows = torch.tensor([blocks[i].start for i in group], device=views[0].device)
        w = views[head.wi].index_select(0, rows)
        bias = None if head.bi is None else views[head.bi].index_select(0, rows)
        for i, stats in zip(group, _measure(engine, members[group[0]], w, bias,
                                            [label_maps[i] for i in group])):
            out[i] = stats
    return out


def _cohort_sizes(m: Member, device, dtype) -> Tensor:
    """The training-set sizes of ``m``'s cohort ``[K]``."""
    return m.engine._sizes[m.ids.cpu()].to(device=device, dtype=dtype)


def _trained(engine, members: list[Member], blocks: list[_Block], views: list[Tensor],
             label_maps: list[Tensor | None], shared: bool) -> list[tuple]:
    """Each member's ``_trained`` (loss and accuracy of each client's trained model on its whole
    training set; (None, None) when its spec does not ask). With the closed-form head, the
    members of one partition and cohort that ask are measured together: client by client, its
    samples are read once for all their trained models (``LinearHead.stats``)."""
    out: list = [(None, None)] * len(members)
    together: dict[object, list[int]] = {}
    for i, m in enumerate(members):
        if m.spec.eval_trained:
            key = (m.engine.data.train.digest, tuple(m.ids.tolist())) if shared else i
            together.setdefault(key, []).append(i)
    head, data = engine.head, engine.data
    for group in together.values():
        if len(group) == 1:
            i = group[0]
            m, b = members[i], blocks[i]
            out[i] = m.engine._trained(m.ids.tolist(), engine.layout.unpack(views, b.rows),
                                       label_maps[i])
            continue
        ids = members[group[0]].ids.tolist()
        dtype, dev = views[0].dtype, views[0].device
        sums = torch.zeros(2, len(ids), len(group), dtype=dtype, device=dev)
        chunk = eval_chunk(data.x)
        for pos, k in enumerate(ids):
            rows = torch.tensor([blocks[i].start + pos for i in group], device=dev)
            w = views[head.wi].index_select(0, rows)
            bias = None if head.bi is None else views[head.bi].index_select(0, rows)
            samples = data.train.of(k)
            y = data.y[samples]
            target = torch.stack([y if label_maps[i] is None else label_maps[i][pos][y]
                                  for i in group], 1)
            for s in range(0, samples.numel(), chunk):
                h = gather(data.x, samples[s:s + chunk]).flatten(1)
                loss, correct = head.stats(h, w, bias, target[s:s + chunk])
                sums[0, pos] += loss.to(dtype).sum(0)
                sums[1, pos] += correct.to(dtype).sum(0)
            sums[:, pos] /= samples.numel()
        for j, i in enumerate(group):
            out[i] = (sums[0, :, j], 100.0 * sums[1, :, j])
    return out


def _measure(engine, member: Member, w: Tensor, bias: Tensor | None,
             label_maps: list[Tensor | None]) -> list[tuple[Tensor, Tensor, Tensor]]:
    """``_before`` of M models (``w [M, in, out]``, ``bias [M, out]``) on ``member``'s cohort:
    per-sample loss and correctness in chunks of samples, then the same per-client means."""
    data, ids = engine.data, member.ids.tolist()
    sizes, owner, samples = member.engine._cohort_samples(ids, w.device)
    y = data.y[samples]
    target = torch.stack([y if lm is None else lm[owner, y] for lm in label_maps], 1)
    chunk = eval_chunk(data.x)
    loss, correct = [], []
    for s in range(0, samples.numel(), chunk):
        h = gather(data.x, samples[s:s + chunk]).flatten(1)
        lo, co = engine.head.stats(h, w, bias, target[s:s + chunk])
        loss.append(lo)
        correct.append(co)
    sums = torch.zeros(2, len(ids), len(label_maps), dtype=w.dtype, device=w.device)
    sums[0].index_add_(0, owner, torch.cat(loss).to(w.dtype))
    sums[1].index_add_(0, owner, torch.cat(correct).to(w.dtype))
    n = sizes.to(device=w.device, dtype=w.dtype)
    return [(sums[0, :, j] / n, 100.0 * sums[1, :, j] / n, n) for j in range(len(label_maps))]


def _stack_scale(members: list[Member], blocks: list[_Block], dev, dtype) -> Tensor | None:
    """Per-row loss factors (loss-scaling attack), None when no member scales."""
    if all(m.spec.loss_scale is None for m in members):
        return None
    return _per_block([torch.ones(b.k, dtype=dtype, device=dev) if m.spec.loss_scale is None
                       else m.spec.loss_scale.to(device=dev, dtype=dtype).reshape(b.k)
                       for m, b in zip(members, blocks)], blocks)


def _stack_label_maps(maps: list[Tensor | None], blocks: list[_Block]) -> Tensor | None:
    """Per-row label maps ``[R, C]`` (label-flipping attack; identity rows for the members
    without one), None when no member relabels."""
    given = [lm for lm in maps if lm is not None]
    if not given:
        return None
    width = int(given[0].shape[1])   # the data's classes: the same for every member
    identity = torch.arange(width, device=given[0].device)
    return _per_block([identity.expand(b.k, width) if lm is None else lm
                       for lm, b in zip(maps, blocks)], blocks)


def _per_block(values: list[Tensor], blocks: list[_Block]) -> Tensor:
    """Each member's per-client values ``[k, ...]`` as rows of the stack (Ditto's personal rows
    repeat their client's)."""
    return torch.cat([v for v, b in zip(values, blocks) for v in ([v, v] if b.ditto else [v])])
