"""The lockstep program: the model's ``torch.fx`` graph run node by node on client-batched values
``[R, B, ...]`` (docs/PERFORMANCE.md, "How the batched engine works").

How each node runs is decided once, on the probe batch ``build`` runs (``_kind``): an
``nn.Linear`` called once as a fused layer whose backward pass applies its SGD update
(``_FusedLinear``: the weight gradient never exists as a tensor), convolutions and GroupNorm as
one grouped op over the rows, a module's own ``stacked_forward`` (fedmoo.models.lstm), elementwise
and per-sample ops on the stacked tensor, anything else as ``vmap`` over its batched arguments
(``randomness="different"``: each row draws its own random numbers).

``LockstepProgram.build`` returns None for a model that torch.fx cannot trace or whose program
does not reproduce the model's output on the probe batch; the batched engine then runs vmap over
the whole model.
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
from fedmoo.params import get_flat

SHAPE_METHODS = {"size", "dim", "numel", "ndimension"}
# Ops that treat dim 0 as independent samples: on the stacked [R, B, ...] tensor they run on the
# [R*B, ...] view (max pooling with return_indices is excluded where it is set).
PER_SAMPLE_FUNCTIONS = {F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d, F.avg_pool2d,
                        F.avg_pool3d, F.adaptive_avg_pool1d, F.adaptive_avg_pool2d,
                        F.adaptive_avg_pool3d, F.local_response_norm}
PER_SAMPLE_MODULES = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d,
                      nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
                      nn.LocalResponseNorm, nn.Flatten)
CONVS = {nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d}
# Elementwise on their one tensor argument: they run on the stacked tensor directly, no vmap
# (dropout draws an independent mask per element, hence per row).
ELEMENTWISE_FUNCTIONS = {F.relu, torch.relu, torch.sigmoid, torch.tanh, F.gelu, F.leaky_relu,
                         F.elu, F.silu, F.dropout, torch.sigmoid_, F.relu_}
# Elementwise on any number of tensors of the same per-row rank: direct on stacked tensors.
BINARY_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg,
                    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.exp, torch.log,
                    torch.abs, torch.sqrt, torch.square, torch.where, torch.clamp}
ELEMENTWISE_METHODS = {"long", "float", "double", "int", "half", "bfloat16", "relu", "sigmoid",
                       "tanh", "add", "sub", "mul", "div", "neg", "exp", "log", "abs", "sqrt",
                       "square", "clamp", "contiguous", "__add__", "__sub__", "__mul__",
                       "__truediv__", "__neg__"}
ELEMENTWISE_MODULES = (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.GELU, nn.LeakyReLU, nn.ELU, nn.SiLU,
                       nn.Dropout, nn.Identity)


def _stacked_linear(h: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``h [R, N, in] @ weight [R, in, out] (+ bias [R, out])``."""
    return torch.bmm(h, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), h, weight)


class _FusedLinear(torch.autograd.Function):
    """``h [R, N, in] @ weight [R, in, out] + bias``; the backward pass updates weight and bias."""

    @staticmethod
    def forward(ctx, h, token, weight, bias, update):
        ctx.h, ctx.weight, ctx.update = h, weight, update
        return _stacked_linear(h, weight, bias)

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
        self.input = graph.find_nodes(op="placeholder")[0]
        self.modules = {n: model.get_submodule(n.target) for n in graph.nodes if n.op == "call_module"}
        self.module_slots = {            # module node -> [(local name, slot)] of its parameters
            n: [(name[len(n.target) + 1:], i) for name, i in self.slot_of.items()
                if name.startswith(f"{n.target}.")] for n in self.modules}
        self.kinds: dict[fx.Node, str] = {}   # how each call node runs, decided on its first run
        self._fns: dict[fx.Node, object] = {}  # and the callable it runs

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
                flat = get_flat(model)
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
                if node is self.input:
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
                    env[node] = slots[i].own(leaves[i])
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
            out = _stacked_linear(h, w, b)
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
        module = self.modules.get(node)
        params = {local: self.layout.slots[i].own(leaves[i])
                  for local, i in self.module_slots.get(node, ())}
        if node not in self.kinds:
            self.kinds[node] = self._kind(node, module, params, args, kwargs, values)
            self._fns[node] = self._function(node, module, params)
        kind, fn = self.kinds[node], self._fns[node]
        if kind == "const":                     # nothing batched: a constant of the program
            return fn(*args, **kwargs), False
        if kind == "stacked":                   # the module's own client-stacked code
            return module.stacked_forward(params, *_fill(args, values), **_fill(kwargs, values)), True
        if kind == "conv":
            return _grouped_conv(module, params, values[0]), True
        if kind == "direct":                    # elementwise: the stacked tensor as it is
            return fn(*_fill(args, values), **_fill(kwargs, values)), True
        if kind == "per_sample":                # on the [R*B, ...] view, in memory order
            v = values[0]
            if v.stride(0) < v.stride(1):       # stored [B, R, ...], e.g. a grouped conv's output
                out = fn(v.transpose(0, 1).flatten(0, 1), *args[1:], **kwargs)
                return out.unflatten(0, (v.shape[1], v.shape[0])).transpose(0, 1), True
            out = fn(v.flatten(0, 1), *args[1:], **kwargs)
            return out.unflatten(0, v.shape[:2]), True
        if kind == "flatten":                   # x.flatten(a) per row = flatten(a + 1)
            return values[0].flatten(args[1] + 1), True
        if kind == "index":                     # x[i, j] per row = x[:, i, j]
            return values[0][(slice(None), *_index_tuple(args[1]))], True
        if kind == "group_norm":
            return _stacked_group_norm(module, params, values[0]), True
        if kind in ("shape", "container"):
            fill = values if kind == "container" else [fx.node.map_aggregate(    # row 0
                v, lambda t: t[0] if isinstance(t, Tensor) else t) for v in values]
            return fn(*_fill(args, fill), **_fill(kwargs, fill)), kind == "container"

        def row(*vals):
            if params:
                return fn(*_fill(args, vals), **_fill(kwargs, vals), params=vals[-1])
            return fn(*_fill(args, vals), **_fill(kwargs, vals))

        return torch.vmap(row, randomness="different")(*values, *([params] if params else [])), True

    @staticmethod
    def _function(node: fx.Node, module: nn.Module | None, params: dict) -> object:
        if node.op == "call_function":
            return node.target
        if node.op == "call_method":
            return lambda obj, *a, **k: getattr(obj, node.target)(*a, **k)
        if params:
            return lambda *a, params, **k: functional_call(module, params, a, k)
        return module

    @staticmethod
    def _kind(node: fx.Node, module: nn.Module | None, params: dict, args, kwargs, values) -> str:
        """How ``node`` runs (see the module docstring), from its target and its arguments."""
        if not values and not params:
            return "const"
        if params:
            if hasattr(module, "stacked_forward"):
                return "stacked"
            if (type(module) is nn.GroupNorm and set(params) == {"weight", "bias"}
                    and len(values) == 1 and values[0].dim() >= 3):
                return "group_norm"
            conv = CONVS.get(type(module))
            if (conv is not None and "weight" in params and module.padding_mode == "zeros"
                    and len(values) == 1
                    and len(args) == 1 and not kwargs and isinstance(args[0], _Hole)
                    and values[0].dim() == module.weight.dim() + 1):   # [R, B, C, *spatial]
                return "conv"
            return "vmap"
        one = (len(values) == 1 and len(args) >= 1 and isinstance(args[0], _Hole)
               and isinstance(values[0], Tensor))
        if one and (isinstance(module, ELEMENTWISE_MODULES) if module is not None
                    else node.op == "call_function" and node.target in ELEMENTWISE_FUNCTIONS):
            return "direct"
        if _same_rank_elementwise(node, values, args, kwargs):
            return "direct"
        if (one and node.target is operator.getitem and len(args) == 2
                and _index_tuple(args[1]) is not None):
            return "index"
        if one and values[0].dim() >= 3 and not any(isinstance(a, _Hole) for a in args[1:]):
            if module is not None:
                ok = isinstance(module, PER_SAMPLE_MODULES) and not getattr(module, "return_indices", False)
                ok = ok and (not isinstance(module, nn.Flatten) or module.start_dim >= 1)
            else:
                ok = (node.op == "call_function" and node.target in PER_SAMPLE_FUNCTIONS
                      and not kwargs.get("return_indices") and len(args) <= 5)
            if ok:
                return "per_sample"
        if (one and node.target in ("flatten", torch.flatten) and module is None
                and len(args) == 2 and isinstance(args[1], int) and args[1] >= 0 and not kwargs):
            return "flatten"
        if node.op == "call_method" and node.target in SHAPE_METHODS:
            return "shape"
        if node.op == "call_function" and node.target is getattr and node.args[1:2] == ("shape",):
            return "shape"
        if node.target is operator.getitem and not isinstance(values[0], Tensor):
            return "container"
        return "vmap"


def _same_rank_elementwise(node: fx.Node, values: list, args, kwargs) -> bool:
    """An elementwise op whose batched tensors share one rank and whose constant tensors have
    no more dims than a row: broadcasting then lines up the stacked tensors row by row."""
    if node.op == "call_function":
        ok = node.target in BINARY_FUNCTIONS
    else:
        ok = node.op == "call_method" and node.target in ELEMENTWISE_METHODS
    if not ok or not values or not all(isinstance(v, Tensor) for v in values):
        return False
    rank = values[0].dim()
    consts: list[Tensor] = []
    fx.node.map_aggregate((args, kwargs), lambda a: consts.append(a) if isinstance(a, Tensor) else None)
    return all(v.dim() == rank for v in values) and all(c.dim() < rank for c in consts)


def _index_tuple(index) -> tuple | None:
    """A per-row index of ints, slices and None as a tuple (None when it holds anything else)."""
    index = index if isinstance(index, tuple) else (index,)
    if all(isinstance(i, (int, slice)) or i is None for i in index):
        return index
    return None


def _stacked_group_norm(module: nn.GroupNorm, params: dict[str, Tensor], x: Tensor) -> Tensor:
    """R stacked GroupNorms: ``x [R, B, C, ...]``; the rows' channels become R x G groups of one
    group_norm, then each row's affine weight and bias."""
    r, b, c = x.shape[:3]
    y = F.group_norm(x.transpose(0, 1).reshape(b, r * c, *x.shape[3:]), module.num_groups * r,
                     eps=module.eps)
    y = y.view(b, r, c, *x.shape[3:]).transpose(0, 1)
    shape = (r, 1, c) + (1,) * (x.dim() - 3)
    return torch.addcmul(params["bias"].view(shape), y, params["weight"].view(shape))


def _grouped_conv(module: nn.Module, params: dict[str, Tensor], x: Tensor) -> Tensor:
    """R stacked convolutions as one grouped convolution: ``x [R, B, C, *spatial]`` ->
    ``[R, B, O, *spatial']`` (rows become groups; the same kernel vmap would emit)."""
    r, b = x.shape[:2]
    w, bias = params["weight"], params.get("bias")
    if bias is None and module.bias is not None:           # a frozen bias: one for every row
        bias = module.bias.expand(r, -1)
    out = CONVS[type(module)](x.transpose(0, 1).reshape(b, r * x.shape[2], *x.shape[3:]),
                              w.reshape(-1, *w.shape[2:]), None if bias is None else bias.reshape(-1),
                              module.stride, module.padding, module.dilation, module.groups * r)
    return out.view(b, r, -1, *out.shape[2:]).transpose(0, 1)
