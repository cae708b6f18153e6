"""Checkpoints for exact resume: the algorithm state, every RNG state and the rows written so far.

``checkpoint.pt`` holds only tensors, numbers, strings and dicts/lists/tuples of those, so it is
loaded with ``torch.load(weights_only=True)`` (no pickled code runs). It is written to a
temporary file and renamed, so a run killed while saving keeps the previous checkpoint.

Per-round randomness (client sampling, local minibatches) is derived from ``(seed, round)``
(``engine.common.round_seed``), so the RNG states saved here only matter for code that draws
from the global generators between rounds; they are restored anyway so nothing depends on that.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmoo.errors import UserError
from fedmoo.report.results import atomic_write
from fedmoo.run.identity import run_config
from fedmoo.state import ServerState, state_from_dict, state_to_dict

FORMAT = 2   # 2: the data digest (``data``); every field is checked on resume (resume_check)
FILENAME = "checkpoint.pt"

def rng_state() -> dict[str, Any]:
    """Torch CPU (and CUDA, if in use), numpy global and python ``random`` generator states."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    out: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                  float(gauss)),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"].cpu())
    name, keys, pos, has_gauss, gauss = s["numpy"]
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = s["python"]
    random.setstate((version, tuple(internal), gauss_next))
    cuda = s.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([c.cpu() for c in cuda])


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file in the same directory, fsync, then rename."""
    buf = io.BytesIO()   # serialised in memory first: a full disk then fails as an OSError
    torch.save(obj, buf)
    atomic_write(path, lambda f: f.write(buf.getbuffer()), "wb")


def check_loadable(value: Any, where: str) -> None:
    """Raise TypeError unless ``value`` is made of what ``torch.load(weights_only=True)`` reads
    back: tensors, numbers, strings, None, and lists / tuples / dicts of those."""
    if isinstance(value, (torch.Tensor, int, float, str, bool, type(None))):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_loadable(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            check_loadable(k, f"{where} key")
            check_loadable(v, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}; "
                    "checkpointed state may hold only tensors, numbers, strings and "
                    "lists/dicts of those")


def save(run_dir: Path, state: ServerState, rows: list[dict[str, Any]], cfg: dict[str, Any],
         elapsed_s: float, data: str | None = None) -> Path:
    """Write ``checkpoint.pt``; ``data``: the digest of what the run trains on
    (``FederatedData.digest``)."""
    path = Path(run_dir) / FILENAME
    fields = state_to_dict(state)
    for name, value in fields.items():
        check_loadable(value, f"{type(state).__name__}.{name}")
    atomic_torch_save({
        "format": FORMAT,
        "round": int(state.round),
        "state": fields,
        "rows": [dict(r) for r in rows],
        "rng": rng_state(),
        "config": run_config(cfg),
        "elapsed_s": float(elapsed_s),
        "data": data,
    }, path)
    return path


def load(run_dir: Path, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint of ``run_dir`` (None if there is none); unreadable files are a UserError."""
    path = Path(run_dir) / FILENAME
    if not path.exists():
        return None
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing here
        raise UserError(f"checkpoint {path} cannot be read ({type(e).__name__}); delete it or "
                        "run with resume=false to start over") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        what = (f"was written by another fedmoo version (format {ckpt['format']!r}; this one "
                f"reads format {FORMAT})" if isinstance(ckpt, dict) and "format" in ckpt
                else "is not a fedmoo checkpoint")
        raise UserError(f"checkpoint {path} {what}; delete it or run with resume=false to "
                        "start over")
    return ckpt


def restore_state(ckpt: dict[str, Any], template: ServerState) -> ServerState:
    """The saved algorithm state, rebuilt with the class of ``algo.init``'s state."""
    return state_from_dict(template, ckpt["state"])


def save_model(path: Path, model: torch.nn.Module) -> None:
    """The final model's ``state_dict`` (weights only), written atomically."""
    atomic_torch_save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
