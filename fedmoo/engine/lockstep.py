"""The lockstep program: the model's ``torch.fx`` graph run on client-batched values.

Every value of the program carries the R rows in front (``[R, B, ...]``). Each node of the graph
runs as follows.

- **An nn.Linear called once** runs as a fused client-batched layer (``_FusedLinear``). Its forward
  pass is one ``baddbmm`` with the weight stored ``[R, in, out]`` (fedmoo.engine.layout). Its
  backward pass computes the input gradient and then applies this step's SGD update to the
  layer's weight and bias (fedmoo.engine.rowsgd). With plain SGD that is one ``baddbmm`` writing
  ``p -= lr h^T d``: the weight gradient is never materialised, which halves the memory traffic
  of the step.
- **Any other module with trainable parameters** (convolutions, GroupNorm, embeddings, a Linear
  called twice) runs as ``vmap(functional_call)`` over per-row parameter leaves. Autograd gives
  their gradients, and the update is applied after the backward pass.
- **Parameterless modules, functions and methods** run as ``vmap`` over their batched arguments
  with ``randomness="different"``, so each row draws its own dropout mask. Shape queries
  (``x.size(0)``, ``x.shape``) run on row 0.

``LockstepProgram.build`` returns None for a model that torch.fx cannot trace (a Python loop over
a tensor's length, like the LSTM) or whose traced program does not reproduce the model's own
output on a probe batch. The batched engine then runs vmap over the whole model instead.
"""

from __future__ import annotations

import operator
from collections import Counter

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from fedmoo.engine.layout import ParamLayout
from fedmoo.engine.rowsgd import RowSGD, add_product, add_tensor

SHAPE_METHODS = {"size", "dim", "numel", "ndimension"}
# Elementwise on their one tensor argument: they run on the stacked tensor directly, no vmap
# (dropout draws an independent mask per element, hence per row).
ELEMENTWISE_FUNCTIONS = {F.relu, torch.relu, torch.sigmoid, torch.tanh, F.gelu, F.leaky_relu,
                         F.elu, F.silu, F.dropout, torch.sigmoid_, F.relu_}
ELEMENTWISE_MODULES = (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.GELU, nn.LeakyReLU, nn.ELU, nn.SiLU,
                       nn.Dropout, nn.Identity)


class _FusedLinear(torch.autograd.Function):
    """``h [R, N, in] @ weight [R, in, out] + bias``; the backward pass updates weight and bias."""

    @staticmethod
    def forward(ctx, h, token, weight, bias, update):
        ctx.h, ctx.weight, ctx.update = h, weight, update
        return torch.bmm(h, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), h, weight)

    @staticmethod
    def backward(ctx, d):
        # The input gradient reads the weights before the update overwrites them.
        dh = torch.bmm(d, ctx.weight.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        ctx.update(ctx.h, d)
        ctx.h = ctx.weight = ctx.update = None
        return dh, None, None, None, None


class _Tracer(fx.Tracer):
    """Keeps modules that bring their own client-stacked code (``stacked_forward``) whole."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return hasattr(m, "stacked_forward") or super().is_leaf_module(m, qualname)


class _Hole:
    """Stands for the i-th batched argument inside a node's arguments."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _fill(args, values):
    return fx.node.map_aggregate(args, lambda a: values[a.i] if isinstance(a, _Hole) else a)


def _row0(v):
    return fx.node.map_aggregate(v, lambda t: t[0] if isinstance(t, Tensor) else t)


class LockstepProgram:
    def __init__(self, model: nn.Module, layout: ParamLayout, graph: fx.Graph):
        self.model, self.layout, self.graph = model, layout, graph
        self.slot_of = {s.name: i for i, s in enumerate(layout.slots)}
        calls = Counter(n.target for n in graph.nodes if n.op == "call_module")
        attrs = {n.target for n in graph.nodes if n.op == "get_attr"}
        self.fused: dict[str, tuple[int, int | None]] = {}   # module name -> (weight, bias) slots
        for target, count in calls.items():
            m = model.get_submodule(target)
            w_name, b_name = f"{target}.weight", f"{target}.bias"
            if (type(m) is not nn.Linear or count != 1 or w_name not in self.slot_of
                    or not layout.slots[self.slot_of[w_name]].transposed or w_name in attrs
                    or (m.bias is not None and b_name not in self.slot_of)):
                continue
            self.fused[target] = (self.slot_of[w_name], self.slot_of.get(b_name))
        fused_slots = {i for pair in self.fused.values() for i in pair if i is not None}
        self.autograd_slots = [i for i in range(len(layout.slots)) if i not in fused_slots]

    @classmethod
    def build(cls, model: nn.Module, layout: ParamLayout, probe: Tensor) -> "LockstepProgram | None":
        """The program of ``model``, or None when it cannot be traced or does not reproduce the
        model's output on ``probe`` (one input batch, compared in eval mode)."""
        try:
            graph = _Tracer().trace(model)
        except Exception:   # any untraceable forward: the engine falls back to whole-model vmap
            return None
        prog = cls(model, layout, graph)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                flat = torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])
                slots = layout.pack(flat, layout.empty(1, flat))
                out, _ = prog.forward(slots, probe.unsqueeze(0), None, None)
                ref = model(probe)
            ok = out.shape[1:] == ref.shape and torch.allclose(out[0], ref, rtol=1e-4, atol=1e-5)
        except Exception:   # an op the per-node vmap cannot run: fall back as well
            ok = False
        finally:
            model.train(was_training)
        return prog if ok else None

    def forward(self, views: list[Tensor], x: Tensor, rule: RowSGD | None,
                token: Tensor | None) -> tuple[Tensor, dict[int, Tensor]]:
        """Run the rows' models on ``x [R, B, ...]``; returns the output ``[R, B, ...]`` and the
        autograd leaves of the non-fused parameters (slot -> ``[R, ...]``). With ``rule`` set, the
        backward pass of the output applies ``rule`` to the fused layers."""
        slots = self.layout.slots
        leaves = {i: views[i].detach().requires_grad_(rule is not None) for i in self.autograd_slots}
        env: dict[fx.Node, object] = {}
        batched: set[fx.Node] = set()
        for node in self.graph.nodes:
            if node.op == "placeholder":          # the input; later inputs keep their defaults
                if node is self.graph.find_nodes(op="placeholder")[0]:
                    env[node] = x
                    batched.add(node)
                elif node.args:
                    env[node] = node.args[0]
                else:
                    raise TypeError(f"input {node.name!r} has no default")
            elif node.op == "get_attr":
                i = self.slot_of.get(node.target)
                if i is None:
                    env[node] = operator.attrgetter(node.target)(self.model)
                else:
                    leaf = leaves[i]
                    env[node] = leaf.transpose(-1, -2) if slots[i].transposed else leaf
                    batched.add(node)
            elif node.op == "output":
                out = env[node.args[0]]
                if not isinstance(out, Tensor):
                    raise TypeError("the model must return one tensor")
                return out, leaves
            elif node.op == "call_module" and node.target in self.fused:
                env[node] = self._fused(node, env, views, rule, token)
                batched.add(node)
            else:
                env[node], is_batched = self._call(node, env, batched, leaves)
                if is_batched:
                    batched.add(node)
        raise TypeError("the traced graph has no output")

    def _fused(self, node: fx.Node, env, views, rule: RowSGD | None, token: Tensor | None) -> Tensor:
        wi, bi = self.fused[node.target]
        h = env[node.args[0]]
        w, b = views[wi], None if bi is None else views[bi]
        lead = h.shape[:-1]
        h = h.reshape(lead[0], -1, h.shape[-1])
        if rule is None:
            out = torch.bmm(h, w) if b is None else torch.baddbmm(b.unsqueeze(1), h, w)
        else:
            def update(h_saved: Tensor, d: Tensor) -> None:
                rule.apply(wi, add_product(h_saved, d))
                if bi is not None:
                    rule.apply(bi, add_tensor(d.sum(1)))

            out = _FusedLinear.apply(h, token, w, b, update)
        return out.reshape(*lead, w.shape[-1])

    def _call(self, node: fx.Node, env, batched: set[fx.Node], leaves) -> tuple[object, bool]:
        values: list = []

        def lift(n: fx.Node):
            if n in batched:
                values.append(env[n])
                return _Hole(len(values) - 1)
            return env[n]

        args, kwargs = fx.node.map_arg(node.args, lift), fx.node.map_arg(node.kwargs, lift)
        module = self.model.get_submodule(node.target) if node.op == "call_module" else None
        params = self._params(node.target, leaves) if module is not None else {}
        if node.op == "call_function":
            fn = node.target
        elif node.op == "call_method":
            fn = lambda obj, *a, **k: getattr(obj, node.target)(*a, **k)  # noqa: E731
        elif params:
            fn = lambda *a, params, **k: functional_call(module, params, a, k)  # noqa: E731
        else:
            fn = module

        if not values and not params:           # nothing batched: a constant of the program
            return fn(*args, **kwargs), False
        if params and hasattr(module, "stacked_forward"):    # the module's own batched code
            return module.stacked_forward(params, *_fill(args, values), **_fill(kwargs, values)), True
        if not params and self._elementwise(node, module, args, values):
            return fn(*_fill(args, values), **_fill(kwargs, values)), True
        if self._flatten(node, args, kwargs, values):   # x.flatten(a) per row = flatten(a + 1)
            return values[0].flatten(args[1] + 1), True
        if self._shape_query(node) or (node.target is operator.getitem
                                       and not isinstance(values[0], Tensor)):
            fill = values if node.target is operator.getitem else [_row0(v) for v in values]
            return fn(*_fill(args, fill), **_fill(kwargs, fill)), node.target is operator.getitem

        def row(*vals):
            if params:
                return fn(*_fill(args, vals), **_fill(kwargs, vals), params=vals[-1])
            return fn(*_fill(args, vals), **_fill(kwargs, vals))

        return torch.vmap(row, randomness="different")(*values, *([params] if params else [])), True

    def _params(self, target: str, leaves) -> dict[str, Tensor]:
        """The stacked parameter leaves of module ``target``, keyed by their local names, in the
        module's own shapes."""
        prefix, out = f"{target}.", {}
        for name, i in self.slot_of.items():
            if name.startswith(prefix):
                leaf = leaves[i]
                out[name[len(prefix):]] = leaf.transpose(-1, -2) if self.layout.slots[i].transposed else leaf
        return out

    @staticmethod
    def _elementwise(node: fx.Node, module: nn.Module | None, args, values: list) -> bool:
        if len(values) != 1 or not args or not isinstance(args[0], _Hole):
            return False
        if module is not None:
            return isinstance(module, ELEMENTWISE_MODULES)
        return node.op == "call_function" and node.target in ELEMENTWISE_FUNCTIONS

    @staticmethod
    def _flatten(node: fx.Node, args, kwargs, values: list) -> bool:
        return (node.target in ("flatten", torch.flatten) and node.op != "call_module"
                and len(values) == 1 and len(args) == 2 and isinstance(args[0], _Hole)
                and isinstance(args[1], int) and args[1] >= 0 and not kwargs)

    @staticmethod
    def _shape_query(node: fx.Node) -> bool:
        if node.op == "call_method":
            return node.target in SHAPE_METHODS
        return node.op == "call_function" and node.target is getattr and node.args[1:2] == ("shape",)
