"""Softmax regression's local training in closed form: no autograd for the papers' logistic
regressions (docs/PERFORMANCE.md: "Closed-form softmax regression" has the design, "Issue 41"
the products stacked along M).

When a model's traced graph is exactly ``flatten -> Linear [-> softmax]`` on classification data
(fedmoo.models.LogReg), the gradient of ``sum_r scale_r sum_i weight_ri CE_ri`` with respect to
the logits ``z = h W + b`` is ``scale_r weight_ri (p_ri - e_y)`` (through the softmax's Jacobian
``s (g - <g, s>)`` for ``softmax_output``) and the weight's is ``h^T g``; ``LinearHead.train``
runs the round's steps itself, about ten kernels each. A weight ``[R, in, out]`` is held as
``[R, out, in]`` and a step works in ``[R, out, B]``. (A fused ``baddbmm_`` update is twice as
fast alone but slower in this loop on Fashion-MNIST's head, measured in place; so the update is
a ``bmm`` and an axpy.) The update is RowSGD's. tests/engine checks all of it against the
sequential engine in float64, for every client setting.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.engine.common import entrywise, gather
from fedmoo.engine.plan import RoundPlan
from fedmoo.engine.rowsgd import Rows, RowSGD, add_tensor

# Inputs up to this size get a copy with a column of ones, so the bias trains inside the GEMMs
# (two kernels fewer a step; Fashion-MNIST's 70,000 x 785 float32 is 220 MB).
FOLD_BYTES = 512 * 2**20
# The folded inputs (and the weights with them) get zero columns up to a multiple of this: every
# entry of a batched product then starts on a 64-byte boundary. MKL gives an entry whose output
# does not (FedFV's 3 classes x 786 inputs: every second entry) other bits than the same entry
# alone, so a row's numbers would depend on its place in the stack (scripts/batch_invariance.py).
ALIGN = 16
# Steps gather their minibatches' inputs together up to this size (one kernel for several
# steps, small enough to stay in a core's L2 cache; a bigger step gathers alone).
GATHER_BYTES = 256 * 2**10
# A step of more samples than take this much of inputs runs chunk by chunk of samples (both
# products of a chunk read its inputs while they are in cache; FedFV's full batches: 655 of
# 5,600 samples a chunk).
CHUNK_BYTES = 2 << 20
# A step whose sources' inputs are larger than this runs a few sources at a time (full batches
# of many rows: each source's rows train independently, so only memory changes).
STEP_BYTES = 64 * 2**20
# A step of at least 2 samples taking this much of (folded) inputs per row multiplies them by
# its source's rows stacked along M, on one thread (``_tall``): ``[W_1; ...; W_G] h^T`` and
# ``[D_1; ...; D_G] h`` give each row the same bits for any G >= 2 and position where every
# operand starts on a 64-byte boundary (and another MKL path for G = 1, so a lone row gets a
# zero row beside it; a GEMV for one sample; other bits on 2 threads for small M:
# scripts/batch_invariance.py), 2.8x faster than a narrow ``bmm`` entry per row.
TALL_BYTES = 1 << 20

_SOFTMAX = {torch.softmax, F.softmax}


@dataclass
class RowOrder:
    """The order a round trains the R stacked rows in (longest first; ``inv`` its inverse), and
    the rows' label maps ``[R, C]`` and loss factors ``[R, 1, 1]`` in that order (None when no
    row has one). A weight ``[R, in, out]`` is held as ``[R, out, in]``, a bias ``[R, out]`` as
    ``[R, out, 1]``."""

    order: Tensor
    inv: Tensor
    label_map: Tensor | None
    scale: Tensor | None

    @classmethod
    def build(cls, place: Tensor, label_map: Tensor | None, scale: Tensor | None) -> "RowOrder":
        """Row r trained ``place[r]``-th (a permutation of 0..R-1); ``label_map [R, C]`` and
        ``scale [R]`` per row."""
        order = torch.argsort(place)
        return cls(order, place, None if label_map is None else label_map[order],
                   None if scale is None else scale[order].view(-1, 1, 1))

    def joined(self, t: Tensor) -> Tensor:
        """A weight or bias in the round's order and layout (a new tensor)."""
        t = t.index_select(0, self.order)
        return t.unsqueeze(2) if t.dim() == 2 else t.transpose(1, 2).contiguous()

    def split(self, j: Tensor, out: Tensor) -> None:
        """Write ``j`` (``joined``'s layout) back into the per-row ``out``."""
        out.copy_(j.transpose(1, 2).reshape(out.shape).index_select(0, self.inv))

    def factor(self, v: Rows | None) -> Rows | None:
        """A per-row hyperparameter ``[R]`` in the round's order; numbers pass."""
        return v if v is None or isinstance(v, float) else v.index_select(0, self.order)


@dataclass
class _Step:
    """A round's update rule and tensors in the round's layout (or slices of its rows)."""

    rule: RowSGD
    acc: Tensor
    label_map: Tensor | None
    scale: Tensor | None

    def rows(self, lo: int, hi: int) -> "_Step":
        """The slices of rows ``lo..hi-1`` (views: updates reach the round's tensors)."""
        def cut(v):
            if v is None or isinstance(v, float):
                return v
            return [t[lo:hi] for t in v] if isinstance(v, list) else v[lo:hi]

        rule = RowSGD(*(cut(getattr(self.rule, f.name)) for f in fields(RowSGD)))
        return _Step(rule, cut(self.acc), cut(self.label_map), cut(self.scale))


class LinearHead:
    def __init__(self, weight_slot: int, bias_slot: int | None, softmax_output: bool):
        self.wi, self.bi, self.softmax_output = weight_slot, bias_slot, softmax_output
        self._ones: tuple[Tensor, Tensor] | None = None

    @classmethod
    def match(cls, program, task: str) -> "LinearHead | None":
        """The closed-form step of ``program`` (a LockstepProgram), or None when its graph is
        not ``x -> flatten(x, 1) -> fused Linear [-> softmax(dim=1 or -1)] -> output``."""
        nodes = list(program.graph.nodes)      # a traced graph ends with its output node
        body = nodes[1:-1]
        if (task != "classification" or nodes[0].op != "placeholder" or len(body) not in (2, 3)
                or not _is_flatten(body[0], nodes[0], program)):
            return None
        linear = body[1]
        if (linear.op != "call_module" or linear.target not in program.fused
                or linear.args != (body[0],) or linear.kwargs):
            return None
        softmax = len(body) == 3
        if softmax and not _is_softmax(body[2], linear):
            return None
        if nodes[-1].args[0] is not body[-1]:
            return None
        wi, bi = program.fused[linear.target]
        return cls(wi, bi, softmax)

    def train(self, order: RowOrder, plan: RoundPlan, x: Tensor, y: Tensor, rule: RowSGD,
              before: bool = False, reuse: int = 1
              ) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
        """Every step of ``plan`` (longest first) for the rows of ``rule`` (per-row views ``[R,
        ...]``, updated in place at the end), in ``order``; returns the rows' losses over their
        last epoch, ``sum_s last_s sum_i weight_si CE_si`` ``[R]``, and with ``before``
        (full-batch plans, every row taking the first step) the rows' mean loss and accuracy
        (%) at their starting models ``[R]``, which the first step's forward pass measures.

        ``reuse`` > 1: each plan row feeds ``reuse`` consecutive rows of ``order``, which read
        its gathered inputs through a stride-0 view (``_products``)."""
        n_rows = int(order.order.numel())
        fold = self.bi is not None and x.numel() * x.element_size() <= FOLD_BYTES
        if fold:
            x = self._with_ones(x)

        def joined(ts: list[Tensor] | None) -> list[Tensor] | None:
            if ts is None:
                return None
            w = ts[self.wi].expand(rule.views[self.wi].shape)
            if self.bi is None:
                return [order.joined(w)]
            b = ts[self.bi].expand(rule.views[self.bi].shape)
            if fold:
                pad = w.new_zeros(w.shape[0], x.shape[1] - w.shape[1] - 1, w.shape[2])
                return [order.joined(torch.cat([w, b.unsqueeze(1), pad], 1))]
            return [order.joined(w), order.joined(b)]

        views = joined(rule.views)
        dtype, dev = views[0].dtype, views[0].device
        b = int(plan.index.shape[2])
        tall = (fold and b > 1 and dev.type == "cpu"
                and b * x.shape[1] * x.element_size() >= TALL_BYTES)
        labels = gather(y, plan.index)                                      # [U, S, B]
        weights = plan.weight.to(dtype)
        loss_weight = (plan.weight * plan.last.unsqueeze(-1)).to(dtype)     # the last epoch's
        if reuse > 1:                                  # per row: each source's repeated
            labels, weights, loss_weight = (t.repeat_interleave(reuse, 0)
                                            for t in (labels, weights, loss_weight))
        whole = _Step(RowSGD(views, joined(rule.bufs), joined(rule.anchor),
                             *(order.factor(v) for v in (rule.lr, rule.mu, rule.momentum,
                                                         rule.weight_decay))),
                      torch.zeros(n_rows, 1, 1, dtype=dtype, device=dev), order.label_map,
                      order.scale)
        # the plan is longest first: a run of steps that the first n sources take is a segment,
        # whose per-step tensors are cut (and views made) once
        flat = x.flatten(1)
        per_source = max(1, STEP_BYTES // max(1, b * flat.shape[1] * flat.element_size()))
        firsts: list[tuple[Tensor, Tensor]] = []
        active = [int(n) for n in plan.active.sum(0).tolist()]   # rows taking each step
        for steps, lo, hi in _blocks(active, per_source):
            r0, r1 = lo * reuse, hi * reuse            # the block's sources' rows
            n = r1 - r0
            t = whole if (r0, r1) == (0, n_rows) else whole.rows(r0, r1)
            with entrywise(1 if tall else n, dev):      # tall: one thread
                self._steps(t, n, b, steps, flat, plan.index[lo:hi, steps],
                            labels[r0:r1, steps], weights[r0:r1, steps],
                            loss_weight[r0:r1, steps], before, firsts, reuse, tall)
        self._split(order, views, rule.views, fold)
        loss_after = whole.acc.view(-1).neg().index_select(0, order.inv)
        if not before:
            return loss_after, None
        return loss_after, tuple(torch.cat(parts).index_select(0, order.inv)
                                 for parts in zip(*firsts))

    def _steps(self, t: "_Step", n: int, b: int, steps: slice, flat: Tensor, index: Tensor,
               labels: Tensor, weights: Tensor, loss_weight: Tensor, before: bool,
               firsts: list, reuse: int, tall: bool) -> None:
        """The steps ``steps`` of the n rows of ``t`` (``index`` has one row per ``reuse`` rows).
        A step of more than CHUNK_BYTES of inputs runs chunk by chunk of samples, its gradient
        summed over the chunks, so a chunk's inputs stay in cache for every row (``tall``: no
        chunk of one sample)."""
        views = t.rule.views
        w, bias = views[0], (views[1] if len(views) > 1 else None)
        wt = w.transpose(1, 2)                          # views: they follow the updates
        bt = None if bias is None else bias.transpose(1, 2)
        cuts = _chunks(b, CHUNK_BYTES // (flat.shape[1] * flat.element_size()), tall)
        for s, hs, label, coef, lw in zip(
                range(steps.start, steps.stop),
                _inputs(flat, index, cuts),                     # [n, chunk, in] chunks
                _by_step(labels).view(-1, n, 1, b).unbind(0),
                _by_step(weights).view(-1, n, 1, b).unbind(0),
                _by_step(loss_weight).view(-1, n, 1, b).unbind(0)):
            grads, stats = None, None
            for cut, h in zip(cuts, hs):
                g, st = self._chunk(t, n, h, w if tall else None, wt, bt, label[..., cut],
                                    coef[..., cut], lw[..., cut], reuse, before and s == 0)
                grads = g if grads is None else [x.add_(y) for x, y in zip(grads, g)]
                stats = st if stats is None or st is None else [x.add_(y) for x, y in zip(stats, st)]
            if stats is not None:
                firsts.append(stats)
            for i, g in enumerate(grads):
                t.rule.apply(i, add_tensor(g))

    def _chunk(self, t: "_Step", n: int, h: Tensor, w: Tensor | None, wt: Tensor,
               bt: Tensor | None, label: Tensor, coef: Tensor, lw: Tensor, reuse: int,
               first: bool) -> tuple[list[Tensor], list[Tensor] | None]:
        """One step's samples ``h [n, b, in]``: adds their last-epoch loss to ``t.acc``; returns
        their gradient of the weight (and bias) and, with ``first``, ``_first_stats``. With
        ``w`` (the weight ``[n, out, in]``) the products are ``_tall``."""
        b = h.shape[1]
        if w is not None:
            h = h.clone() if h.data_ptr() % 64 else h      # on a 64-byte boundary (_tall)
            z = _tall(w, h.transpose(1, 2), reuse)
        else:   # [n, b, out] as [n, out, b]: MKL's h W^T is twice as fast as W h^T per entry
            z = _products(h, wt, bt, reuse, shared=0).transpose(1, 2)
        p = torch.softmax(z, 1) if self.softmax_output else None
        logp = torch.log_softmax(z if p is None else p, 1)
        target = label                                                  # [n, 1, b]
        if t.label_map is not None:                     # label_map [n, C]: per-row labels
            target = t.label_map.gather(1, label.reshape(n, b)).view(n, 1, b)
        picked = logp.gather(1, target)
        t.acc.add_((lw * picked).sum(2, keepdim=True))
        stats = _first_stats(z if p is None else p, picked, target, coef) if first else None
        d = logp.exp()
        d.scatter_add_(1, target, torch.full((1, 1, 1), -1.0, dtype=d.dtype,
                                             device=d.device).expand(n, 1, b))
        d.mul_(coef if t.scale is None else coef * t.scale)
        if p is not None:                               # through softmax: p (d - <d, p>)
            d = p * (d - (d * p).sum(1, keepdim=True))
        grads = [_products(d, h, None, reuse, shared=1) if w is None
                 else _tall(d, h, reuse)]                               # [n, out, in]
        if bt is not None:
            grads.append(d.sum(2, keepdim=True))
        return grads, stats

    def _split(self, order: RowOrder, joined: list[Tensor], views: list[Tensor],
               fold: bool) -> None:
        """The trained weights (and bias) back into the per-row ``views``."""
        w = views[self.wi]
        if not fold:
            for i, j in zip([self.wi, self.bi], joined):
                order.split(j, views[i])
            return
        n_in = w.shape[1]
        both = w.new_empty(w.shape[0], joined[0].shape[2], w.shape[2])  # [R, in + 1 + pad, out]
        order.split(joined[0], both)
        w.copy_(both[:, :n_in])
        views[self.bi].copy_(both[:, n_in])

    def _with_ones(self, x: Tensor) -> Tensor:
        """``x`` flattened, then a column of ones and zeros up to a multiple of ALIGN columns
        (made once per dataset tensor)."""
        if self._ones is None or self._ones[0] is not x:
            flat = x.flatten(1)
            pad = -(flat.shape[1] + 1) % ALIGN
            self._ones = (x, torch.cat([flat, flat.new_ones(flat.shape[0], 1),
                                        flat.new_zeros(flat.shape[0], pad)], 1))
        return self._ones[1]


def _first_stats(output: Tensor, picked: Tensor, target: Tensor,
                 weight: Tensor) -> tuple[Tensor, Tensor]:
    """Mean cross-entropy and accuracy (%) per row of one step ``[n]``, from the model's
    ``output [n, out, B]`` (a tie goes to the first class, as argmax)."""
    out = output.shape[1]
    top = output.amax(1, keepdim=True)
    cls = torch.arange(out, dtype=output.dtype, device=output.device).view(1, out, 1)
    first = torch.where(output == top, cls, float(out)).amin(1, keepdim=True)   # [n, 1, B]
    correct = (first == target).to(output.dtype)
    return (weight * picked).sum(2).view(-1).neg(), 100.0 * (weight * correct).sum(2).view(-1)


def _products(a: Tensor, b: Tensor, bias: Tensor | None, reuse: int, shared: int) -> Tensor:
    """``bmm(a, b)`` (``baddbmm`` with ``bias``); with ``reuse`` > 1 the operand ``shared`` (0:
    ``a``, 1: ``b``) has one entry per ``reuse`` rows, read by each through a stride-0 view (the
    bits of a copy per row: scripts/batch_invariance.py)."""
    if reuse == 1:
        return torch.bmm(a, b) if bias is None else torch.baddbmm(bias, a, b)
    ops = [a, b]
    rows = ops[1 - shared].shape[0]
    out = a.new_empty(rows, a.shape[1], b.shape[2])
    for i in range(rows // reuse):
        part = slice(i * reuse, (i + 1) * reuse)
        one = ops[shared][i].expand(reuse, *ops[shared].shape[1:])
        x, y = (one, b[part]) if shared == 0 else (a[part], one)
        if bias is None:
            torch.bmm(x, y, out=out[part])
        else:
            torch.baddbmm(bias[part], x, y, out=out[part])
    return out


def _tall(a: Tensor, b: Tensor, reuse: int) -> Tensor:
    """``a [n, out, k]`` times ``b [n / reuse, k, m]``: for each entry ``b_i``, its ``reuse``
    rows of ``a`` stacked along M, ``[a_1; ...; a_G] b_i``, one GEMM (a lone row beside a zero
    row), every operand on a 64-byte boundary (TALL_BYTES)."""
    n, out, k = a.shape
    parts = []
    for i in range(b.shape[0]):
        m = a[i * reuse:(i + 1) * reuse].reshape(reuse * out, k)
        if reuse == 1:
            m = torch.cat([m, torch.zeros_like(m)])
        elif m.data_ptr() % 64:
            m = m.clone()
        parts.append(torch.mm(m, b[i])[:reuse * out])
    return torch.cat(parts).view(n, out, -1)


def _chunks(b: int, size: int, tall: bool) -> list[slice]:
    """A step's ``b`` samples in chunks of ``size`` (at least 1); ``tall``: none of one sample
    (a GEMV), the last sample joining the chunk before."""
    starts = list(range(0, b, max(1 + tall, size)))
    if tall and b - starts[-1] == 1:
        starts.pop()
    return [slice(c, e) for c, e in zip(starts, starts[1:] + [b])]


def _blocks(rows: list[int], per_source: int):
    """``(steps, lo, hi)``: each run of steps taken by the same first n sources (``rows``: n
    per step), cut into blocks of at most ``per_source`` sources ``lo..hi-1``."""
    start = 0
    for s in range(1, len(rows) + 1):
        if s == len(rows) or rows[s] != rows[start]:
            for lo in range(0, rows[start], per_source):
                yield slice(start, s), lo, min(rows[start], lo + per_source)
            start = s


def _inputs(flat: Tensor, index: Tensor, cuts: list[slice]):
    """The inputs of each step of ``index [n, S, B]``, as its chunks ``[n, cut, in]``. Steps of
    one chunk are gathered as many at a time as fit in GATHER_BYTES; a larger step chunk by
    chunk as they are read (no fresh pages for a copy of the whole step each round)."""
    n, steps, b = index.shape
    if len(cuts) > 1:
        for s in range(steps):
            yield (gather(flat, index[:, s, c]) for c in cuts)
        return
    span = max(1, GATHER_BYTES // max(1, n * b * flat.shape[1] * flat.element_size()))
    for lo in range(0, steps, span):
        yield from ((h,) for h in gather(flat, index[:, lo:lo + span].transpose(0, 1)).unbind(0))


def _by_step(t: Tensor) -> Tensor:
    """``[n, S, ...]`` as a contiguous ``[S, n, ...]``: iterating it gives each step's tensor
    without a copy in the step."""
    return t.transpose(0, 1).contiguous()


def _is_flatten(node, x, program) -> bool:
    if node.op in ("call_method", "call_function") and node.target in ("flatten", torch.flatten):
        return node.args == (x, 1) and not node.kwargs
    if node.op == "call_module":
        m = program.model.get_submodule(node.target)
        return (isinstance(m, torch.nn.Flatten) and m.start_dim == 1 and m.end_dim == -1
                and node.args == (x,))
    return False


def _is_softmax(node, linear) -> bool:
    if node.op != "call_function" or node.target not in _SOFTMAX:
        return False
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
    extra = set(node.kwargs) - {"dim"}
    return node.args[:1] == (linear,) and dim in (1, -1) and not extra
