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

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.engine.rowsgd import RowSGD, add_product, add_tensor

_SOFTMAX = {torch.softmax, F.softmax}


@dataclass
class Sharing:
    """R stacked rows read from U sources, G rows each.
    ``order [R]`` lists the rows source by source (``src[order] = 0..0, 1..1, ...``) and ``inv``
    is its inverse; ``label_map [U, C, G]`` and ``scale [U, 1, G]`` are the rows' label maps and
    loss factors in that order (None when no row has one)."""

    order: Tensor
    inv: Tensor
    groups: int
    size: int
    label_map: Tensor | None
    scale: Tensor | None
    _flat: dict = field(default_factory=dict)

    def flat_index(self, n_in: int, out: int) -> tuple[Tensor, Tensor]:
        """Element indices (made once per shape) that lay the rows' weights ``[R, in, out]``
        out as ``[U, in, G*out]`` and the gradients ``[U, G*out, in]`` back as ``[R, in, out]``:
        one ``index_select`` each, several times faster than permuting narrow layers' copies."""
        if (n_in, out) not in self._flat:
            u, g, dev = self.groups, self.size, self.order.device
            rows = torch.arange(u * g * n_in * out, device=dev).view(-1, n_in, out)
            fwd = rows.index_select(0, self.order).view(u, g, n_in, out).permute(0, 2, 1, 3)
            back = rows.view(u, g, out, n_in).transpose(2, 3).flatten(0, 1)
            self._flat[n_in, out] = (fwd.reshape(-1), back.index_select(0, self.inv).reshape(-1))
        return self._flat[n_in, out]

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
            scale = scale[order].view(u, 1, g)
        return cls(order, inv, u, g, label_map, scale)


class LinearHead:
    def __init__(self, weight_slot: int, bias_slot: int | None, softmax_output: bool):
        self.wi, self.bi, self.softmax_output = weight_slot, bias_slot, softmax_output
        self.shared_steps = 0   # steps taken by ``shared_step`` (tests check it is taken)

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

    def step(self, rule: RowSGD, x: Tensor, y: Tensor, weight: Tensor, scale: Tensor | None,
             task_weights: Tensor | None = None) -> Tensor:
        """One SGD step of every row (``x [R, B, ...]``, ``y``/``weight [R, B]``); returns
        the rows' minibatch losses ``sum_i weight_ri CE_ri``."""
        w = rule.views[self.wi]
        h = x.flatten(2)
        z = torch.bmm(h, w) if self.bi is None else torch.baddbmm(
            rule.views[self.bi].unsqueeze(1), h, w)
        s = torch.softmax(z, -1) if self.softmax_output else None
        logp = torch.log_softmax(z if s is None else s, -1)
        target = y.unsqueeze(-1)
        losses = (logp.gather(-1, target).squeeze(-1) * weight).sum(1).neg()
        coef = weight if scale is None else weight * scale.unsqueeze(1)
        g = logp.exp()
        g.scatter_add_(-1, target, torch.full_like(target, -1, dtype=g.dtype))
        g.mul_(coef.unsqueeze(-1))
        if s is not None:                       # through softmax: s * (g - <g, s>)
            g = s * (g - (g * s).sum(-1, keepdim=True))
        rule.apply(self.wi, add_product(h, g))
        if self.bi is not None:
            rule.apply(self.bi, add_tensor(g.sum(1)))
        return losses

    def shared_step(self, rule: RowSGD, share: Sharing, x: Tensor, y: Tensor,
                    weight: Tensor) -> Tensor:
        """``step`` for rows that share their sources: ``x [U, B, ...]``, ``y``/``weight
        [U, B]`` per source; returns the rows' losses ``[R]`` in row order.

        The G rows of source u are laid side by side: ``Z_u = h_u W_u`` with ``W_u [in, G*out]``
        the rows' weights concatenated, viewed ``[B, G, out]``; ``g`` as in ``step`` with the
        row's label and factor; the weights' gradient ``(G_u^T h_u)^T`` with ``G_u [B, G*out]``.
        """
        self.shared_steps += 1
        u, rows = share.groups, share.size
        w = rule.views[self.wi]
        n_in, out = int(w.shape[1]), int(w.shape[2])
        h = x.flatten(2)
        b = int(h.shape[1])
        fwd, back = share.flat_index(n_in, out)
        wcat = w.view(-1).index_select(0, fwd).view(u, n_in, rows * out)
        z = torch.bmm(h, wcat).view(u, b, rows, out)
        if self.bi is not None:
            z = z + rule.views[self.bi].index_select(0, share.order).view(u, 1, rows, out)
        s = torch.softmax(z, -1) if self.softmax_output else None
        logp = torch.log_softmax(z if s is None else s, -1)
        labels = y.unsqueeze(-1).expand(u, b, rows)
        if share.label_map is not None:                 # label_map [U, C, G]: per-row labels
            labels = share.label_map.gather(1, labels)
        target = labels.unsqueeze(-1)                   # [U, B, G, 1]
        wt = weight.unsqueeze(-1)                       # [U, B, 1]
        losses = (logp.gather(-1, target).squeeze(-1) * wt).sum(1).neg()   # [U, G]
        coef = wt if share.scale is None else wt * share.scale
        g = logp.exp()
        g.scatter_add_(-1, target, torch.full_like(target, -1, dtype=g.dtype))
        g.mul_(coef.unsqueeze(-1))
        if s is not None:
            g = s * (g - (g * s).sum(-1, keepdim=True))
        dw = torch.bmm(g.reshape(u, b, rows * out).transpose(1, 2), h)      # [U, G*out, in]
        rule.apply(self.wi, add_tensor(dw.view(-1).index_select(0, back).view_as(w)))
        if self.bi is not None:
            rule.apply(self.bi, add_tensor(g.sum(1).flatten(0, 1).index_select(0, share.inv)))
        return losses.flatten().index_select(0, share.inv)

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
