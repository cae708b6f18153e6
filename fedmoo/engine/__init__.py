"""Local training of a cohort. ``build(name, ...)`` returns an engine with ``train(ids, w, spec, seed)``."""

from __future__ import annotations

from fedmoo.errors import UserError

ENGINES = ("sequential",)


def build(name: str, model, data, client_cfg: dict):
    cfg = {k: v for k, v in client_cfg.items() if k != "description"}
    if name == "sequential":
        from fedmoo.engine.sequential import SequentialEngine

        return SequentialEngine(model, data, **cfg)
    raise UserError(f"engine={name!r} is not valid; choose one of: {', '.join(ENGINES)}")
