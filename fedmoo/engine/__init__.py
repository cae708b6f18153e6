"""Local training of a cohort. ``build(engine_cfg, ...)`` returns an engine with ``train(ids, w, spec, seed)``.

``engine_cfg`` is a name (``auto``, ``sequential``, ``batched``) or a mapping such as
``{name: batched, program: vmap, compile: true}``: ``program`` picks the batched engine's program
(``auto``: the torch.fx lockstep program where the model traces, else vmap over the whole model),
``compile`` runs the vmap step through ``torch.compile`` (off by default). ``auto`` (the default)
is ``batched`` when the model is on a GPU and the batched engine can train it, else ``sequential``.
"""

from __future__ import annotations

from collections.abc import Mapping

from fedmoo.errors import UserError

ENGINES = ("auto", "sequential", "batched")


def resolve_auto(model, device_type: str | None = None) -> str:
    """``engine=auto``: the batched engine on CUDA for the models it can train, else sequential.
    ``device_type`` defaults to the device of the model's parameters."""
    from fedmoo.engine.batched import unbatchable

    if device_type is None:
        device_type = next(model.parameters()).device.type
    return "batched" if device_type == "cuda" and unbatchable(model) is None else "sequential"


def build(engine_cfg, model, data, client_cfg: dict):
    cfg = {k: v for k, v in client_cfg.items() if k != "description"}
    opts = dict(engine_cfg) if isinstance(engine_cfg, Mapping) else {"name": engine_cfg}
    name = opts.pop("name", None)
    if name == "auto":
        if opts:
            raise UserError(f"engine.{min(opts)} is not an option of engine=auto; "
                            "name the engine: engine=batched or engine=sequential")
        name = resolve_auto(model)
    if name == "sequential" and not opts:
        from fedmoo.engine.sequential import SequentialEngine

        return SequentialEngine(model, data, **cfg)
    if name == "batched":
        from fedmoo.engine.batched import BatchedEngine

        unknown = sorted(set(opts) - {"compile", "program"})
        if unknown:
            raise UserError(f"engine.{unknown[0]} is not an option of engine=batched; "
                            "its options are engine.compile (true or false) and engine.program "
                            "(auto, lockstep or vmap)")
        compile_step = opts.get("compile", False)
        if not isinstance(compile_step, bool):
            raise UserError(f"engine.compile={compile_step!r} must be true or false")
        return BatchedEngine(model, data, **cfg, compile=compile_step,
                             program=str(opts.get("program", "auto")))
    if name == "sequential":
        raise UserError(f"engine.{min(opts)} is not an option of engine=sequential; "
                        "use engine=sequential without options")
    raise UserError(f"engine={name!r} is not valid; choose one of: {', '.join(ENGINES)}")
