"""Local training of a cohort. ``build(engine_cfg, model, data, sgd)`` returns an engine
(``fedmoo.engine.base.Engine``) that trains with the client's SGD settings ``sgd``.

``engine_cfg`` is a name (``auto``, ``sequential``, ``batched``) or a mapping such as
``{name: batched, program: vmap, compile: true}`` (the ``engine.*`` knobs). ``auto`` is
``batched`` where it is faster (``resolve_auto``), else ``sequential``, the sequential engine with
a warning when the batched one fails to build; the choice and its reason go to summary.json.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from torch import nn

from fedmoo.engine.base import Engine, LocalSGD
from fedmoo.errors import UserError
from fedmoo.config.schema import check_knobs, engine_options

log = logging.getLogger(__name__)


# Leaf modules the batched engine trains faster than the sequential loop on a CPU: fused
# client-batched linear layers and elementwise ops. Measured by scripts/bench.py on the 2-core
# CPU VM (docs/PERFORMANCE.md): logreg 7-8x, MLP 2.3-3.2x faster batched; convolutions (CNN
# 0.5-1.1x) and LSTMs (0.9-1.1x) are compute-bound and gain nothing on a CPU, so they stay
# sequential there.
CPU_FAST = (nn.Linear, nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LeakyReLU, nn.ELU, nn.Softmax,
            nn.LogSoftmax, nn.Flatten, nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d)


def resolve_auto(model, device_type: str | None = None) -> tuple[str, str]:
    """``engine=auto``: (engine, why). The batched engine for every model it can train on CUDA,
    on a CPU only for models of ``CPU_FAST`` modules, else the sequential one: the choice depends
    only on the model and the device (by default its parameters')."""
    from fedmoo.engine.batched import unbatchable

    if device_type is None:
        device_type = next(model.parameters()).device.type
    why_not = unbatchable(model)
    if why_not is not None:
        return "sequential", f"auto: the batched engine cannot train this model ({why_not})"
    if device_type == "cuda":
        return "batched", "auto: on CUDA the batched engine trains every model it can"
    slow = sorted({type(m).__name__ for m in model.modules()
                   if not list(m.children()) and not isinstance(m, CPU_FAST)})
    if slow:
        return "sequential", (f"auto: on a CPU, {', '.join(slow)} layers gain nothing from "
                              "batching clients")
    return "batched", "auto: on a CPU, linear layers train several times faster batched"


def build(engine_cfg, model, data, sgd: LocalSGD) -> Engine:
    opts = dict(engine_cfg) if isinstance(engine_cfg, Mapping) else {"name": engine_cfg}
    name = opts.pop("name", None)
    check_knobs({"engine": {"name": name, **opts}})    # for Python callers: the name is known
    if name == "auto":
        name, why = resolve_auto(model)
        try:
            engine = build(name, model, data, sgd)
        except Exception as e:      # noqa: BLE001 -- see below
            # engine=auto must not end a user's run because the batched engine failed to build
            # (tracing its program runs the model on the device): the reference engine runs.
            if name != "batched" or isinstance(e, UserError):
                raise
            log.warning("engine=auto: the batched engine failed to build (%s: %s); the "
                        "sequential engine runs instead", type(e).__name__, e)
            engine = build("sequential", model, data, sgd)
            why = f"auto: the batched engine failed to build ({type(e).__name__}: {e})"
        engine.choice = why
        return engine
    if name == "sequential":
        from fedmoo.engine.sequential import SequentialEngine

        return SequentialEngine(model, data, sgd)
    from fedmoo.engine.batched import BatchedEngine

    given = {k.leaf: opts.get(k.leaf, k.default) for k in engine_options()}
    if given["cuda_graph"] and next(model.parameters()).device.type != "cuda":
        raise UserError("engine.cuda_graph=true needs a CUDA device (device=cuda)")
    return BatchedEngine(model, data, sgd, **given)
