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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.engine.rowsgd import RowSGD, add_product, add_tensor

_SOFTMAX = {torch.softmax, F.softmax}


class LinearHead:
    def __init__(self, weight_slot: int, bias_slot: int | None, softmax_output: bool):
        self.wi, self.bi, self.softmax_output = weight_slot, bias_slot, softmax_output

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
