"""Softmax regression's step in closed form: no autograd for the papers' logistic regressions.

When a model's traced graph is exactly ``flatten -> Linear [-> softmax]`` on classification data
(fedmoo.models.LogReg: FedFV's FMNIST table, FedMGDA+'s and AFL's Adult, q-FFL's Synthetic),
the batched engine's step needs no autograd: with logits ``z = h W + b`` (``p = softmax(z)``,
or ``softmax(softmax(z))`` for ``softmax_output``) and one-hot labels ``e_y``, the gradient of
``sum_r scale_r sum_i weight_ri CE_ri`` with respect to ``z`` is
``scale_r weight_ri (p_ri - e_y)``, passed through the softmax's Jacobian ``s (g - <g, s>)``
when the model outputs probabilities. The weight's update is then ``h^T g`` and the bias's
``sum_i g_i``, written by fedmoo.engine.rowsgd as for any fused layer. About 12 kernels a step
instead of an autograd graph: these sweeps run millions of tiny steps (FedMGDA+ Table B.2:
3,860 steps a round), where per-step overhead is the whole cost. tests/engine checks it against
the sequential engine in float64.

Shared inputs (``shared_step``): in a sweep, runs of one seed draw the same minibatches, so
several rows read the same samples every step. With the rows grouped by source (U sources of G
rows each), the logits of a source's G rows come from one GEMM of its samples ``h_u [B, in]``
against the rows' weights side by side, ``z_u = h_u [W_1 ... W_G]`` (``[B, G*out]``), and the
weights' gradients from one more, ``[dW_1 ... dW_G] = h_u^T [g_1 ... g_G]``: the samples are read
once per source instead of once per row. The per-row gradient ``g`` is as above (each row with
its own label map and loss scale), and the per-row weight gradients then go through RowSGD as
for any materialised gradient, so momentum, weight decay, the proximal term and per-row learning
rates are unchanged. ``stats`` evaluates M models on the same samples the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.engine.common import gather
from fedmoo.engine.plan import RoundPlan
from fedmoo.engine.rowsgd import Rows, RowSGD, add_tensor

_SOFTMAX = {torch.softmax, F.softmax}


@dataclass
class Sharing:
    """R stacked rows read from U sources, G rows each, and the round's layout of their weights.

    ``order [R]`` lists the rows source by source (``src[order] = 0..0, 1..1, ...``) and ``inv``
    is its inverse; ``label_map [U, C, G]`` and ``scale [U, 1, 1, G]`` are the rows' label maps
    and loss factors in that order (None when no row has one). For the round, a weight ``[R,
    in, out]`` is held as ``[U, in, out*G]`` (the G rows of a source side by side, class-major,
    so one GEMM gives their logits ``[U, B, out, G]``, and the softmax runs over a dimension that
    is not the innermost: with a few classes that kernel is several times faster) and a bias
    ``[R, out]`` as ``[U, 1, out*G]``; a per-row number ``[R]`` becomes the factor ``[U, 1,
    out*G]`` of the same columns. Rows trained one by one are the case G = 1
    (``src = 0..R-1``).
    """

    order: Tensor
    inv: Tensor
    groups: int
    size: int
    label_map: Tensor | None
    scale: Tensor | None

    @classmethod
    def build(cls, src: Tensor, label_map: Tensor | None, scale: Tensor | None
              ) -> "Sharing | None":
        """The sharing of rows with sources ``src [R]`` (numbered 0..U-1), or None when some
        source has a different number of rows than another (then rows are trained one by one).
        ``label_map [R, C]`` and ``scale [R]`` are per row."""
        counts = torch.bincount(src)
        u, g = int(counts.numel()), int(counts[0])
        if bool((counts != g).any()):
            return None
        order = torch.argsort(src, stable=True)
        inv = torch.argsort(order)
        if label_map is not None:
            label_map = label_map[order].view(u, g, -1).transpose(1, 2)
        if scale is not None:
            scale = scale[order].view(u, 1, 1, g)
        return cls(order, inv, u, g, label_map, scale)

    @classmethod
    def rows(cls, n: int, label_map: Tensor | None, scale: Tensor | None,
             device) -> "Sharing":
        """Every row its own source (G = 1)."""
        out = cls.build(torch.arange(n, device=device), label_map, scale)
        assert out is not None
        return out

    def joined(self, t: Tensor) -> Tensor:
        """A weight ``[R, in, out]`` or bias ``[R, out]`` of the rows in the round's layout
        (``[U, in, out*G]`` / ``[U, 1, out*G]``; a new tensor)."""
        u, g = self.groups, self.size
        t = t.index_select(0, self.order)
        if t.dim() == 2:
            t = t.unsqueeze(1)
        return t.view(u, g, *t.shape[1:]).permute(0, 2, 3, 1).reshape(u, t.shape[1], -1)

    def split(self, j: Tensor, out: Tensor) -> None:
        """Write ``j`` (``joined``'s layout) back into the per-row ``out``."""
        u, n_in = j.shape[:2]
        rows = j.view(u, n_in, -1, self.size).permute(0, 3, 1, 2).reshape(out.shape)
        out.copy_(rows.index_select(0, self.inv))

    def factor(self, v: Rows | None, out: int) -> Rows | None:
        """A per-row hyperparameter ``[R]`` as the factor ``[U, 1, out*G]``; numbers pass."""
        if v is None or isinstance(v, float):
            return v
        u, g = self.groups, self.size
        return v.index_select(0, self.order).view(u, 1, g).expand(u, out, g).reshape(u, 1, -1)


class LinearHead:
    def __init__(self, weight_slot: int, bias_slot: int | None, softmax_output: bool):
        self.wi, self.bi, self.softmax_output = weight_slot, bias_slot, softmax_output
        self.shared_steps = 0   # steps taken with G > 1 (tests check the shared path ran)

    @classmethod
    def match(cls, program, task: str) -> "LinearHead | None":
        """The closed-form step of ``program`` (a LockstepProgram), or None when its graph is
        not ``x -> flatten(x, 1) -> fused Linear [-> softmax(dim=1 or -1)] -> output``."""
        if task != "classification":
            return None
        nodes = list(program.graph.nodes)
        if [n.op for n in nodes[:1]] != ["placeholder"] or nodes[-1].op != "output":
            return None
        body = nodes[1:-1]
        if len(body) not in (2, 3) or not _is_flatten(body[0], nodes[0], program):
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

    def train(self, share: Sharing, plan: RoundPlan, x: Tensor, y: Tensor, rule: RowSGD
              ) -> Tensor:
        """Every step of ``plan`` (one plan row per source) for the rows of ``rule`` (per-row
        views ``[R, ...]``, updated in place at the end); returns the rows' losses over their
        last epoch, ``sum_s last_s sum_i weight_si CE_si`` ``[R]``."""
        u, g = share.groups, share.size
        weight_rows = rule.views[self.wi]
        out = int(weight_rows.shape[-1])
        idx = [self.wi] + ([] if self.bi is None else [self.bi])

        def joined(ts: list[Tensor] | None) -> list[Tensor] | None:
            if ts is None:
                return None
            return [share.joined(ts[i].expand(rule.views[i].shape)) for i in idx]

        views, bufs, anchor = joined(rule.views), joined(rule.bufs), joined(rule.anchor)
        full_lr = share.factor(rule.lr, out)
        mu, momentum = share.factor(rule.mu, out), share.factor(rule.momentum, out)
        decay = share.factor(rule.weight_decay, out)
        w, bias = views[0], (views[1] if self.bi is not None else None)
        dtype = w.dtype
        # the loss of the last epoch, accumulated as [U, 1, G]: one baddbmm a step
        loss_weight = (plan.weight * plan.last.unsqueeze(-1)).to(dtype)
        acc = torch.zeros(u, 1, g, dtype=dtype, device=w.device)
        minus_one = torch.full((1, 1, 1, 1), -1.0, dtype=dtype, device=w.device)
        active = plan.active.to(dtype).view(u, 1, 1, -1)
        for s in range(plan.steps):
            step = plan.index[:, s]
            h = gather(x, step).flatten(2)                                  # [U, B, in]
            b = int(h.shape[1])
            z = (torch.bmm(h, w) if bias is None else torch.baddbmm(bias, h, w)).view(u, b, out, g)
            p = torch.softmax(z, 2) if self.softmax_output else None
            logp = torch.log_softmax(z if p is None else p, 2)
            labels = gather(y, step).unsqueeze(-1).expand(u, b, g)
            if share.label_map is not None:                 # label_map [U, C, G]: per-row labels
                labels = share.label_map.gather(1, labels)
            target = labels.unsqueeze(2)                                    # [U, B, 1, G]
            acc.baddbmm_(loss_weight[:, s].unsqueeze(1), logp.gather(2, target).view(u, b, g))
            d = logp.exp()
            d.scatter_add_(2, target, minus_one.expand(u, b, 1, g))
            coef = plan.weight[:, s].view(u, b, 1, 1)
            d.mul_(coef if share.scale is None else coef * share.scale)
            if p is not None:                               # through softmax: p (d - <d, p>)
                d = p * (d - (d * p).sum(2, keepdim=True))
            d = d.view(u, b, out * g)
            lr = full_lr if plan.full[s] else full_lr * active[..., s]
            step_rule = RowSGD(views, bufs, anchor, lr, mu, momentum, decay)
            step_rule.apply(0, add_tensor(_weight_grad(h, d)))
            if bias is not None:
                step_rule.apply(1, add_tensor(d.sum(1, keepdim=True)))
            if g > 1:
                self.shared_steps += 1
        for i, j in zip(idx, views):
            share.split(j, rule.views[i])
        return acc.view(-1).neg().index_select(0, share.inv)

    @torch.no_grad()
    def stats(self, h: Tensor, w: Tensor, bias: Tensor | None,
              target: Tensor) -> tuple[Tensor, Tensor]:
        """Per-sample cross-entropy and correctness ``[N, M]`` of M models (weights ``w
        [M, in, out]``, biases ``[M, out]``) on the same samples ``h [N, in]`` with labels
        ``target [N, M]``: one GEMM ``h [W_1 ... W_M]``, as the model itself would compute
        them (the softmax output's cross-entropy is that of the probabilities as logits)."""
        m, n_in, out = w.shape
        z = (h @ w.permute(1, 0, 2).reshape(n_in, m * out)).view(-1, m, out)
        if bias is not None:
            z = z + bias
        if self.softmax_output:
            z = torch.softmax(z, -1)
        loss = torch.log_softmax(z, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1).neg()
        return loss, (z.argmax(-1) == target).to(z.dtype)


def _weight_grad(h: Tensor, d: Tensor) -> Tensor:
    """``h^T d`` (``[U, in, C]``) for ``h [U, B, in]`` and ``d [U, B, C]``."""
    return torch.bmm(h.transpose(1, 2), d)


def _is_flatten(node, x, program) -> bool:
    if node.op == "call_method" and node.target == "flatten":
        return node.args in ((x, 1),) and not node.kwargs
    if node.op == "call_function" and node.target is torch.flatten:
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
