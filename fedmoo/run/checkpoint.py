"""Checkpoints for exact resume: the algorithm state, every RNG state and the rows written so far.

``checkpoint.pt`` holds only tensors, numbers, strings and containers of those, so it loads
with ``torch.load(weights_only=True)``; it is written atomically, so a run killed while saving
keeps the previous checkpoint. Before anything in it is used, a checkpoint is checked whole
against the run's own live state (``check``): the first thing that does not fit is named in
one line (a UserError).
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmoo.errors import UserError
from fedmoo.report.results import atomic_write
from fedmoo.run.identity import run_config
from fedmoo.state import ServerState, state_to_dict

FORMAT = 2   # 2: the data digest (``data``); every field is checked on resume (``check``)
FILENAME = "checkpoint.pt"
FIELDS = ("format", "round", "state", "rows", "rng", "config", "elapsed_s", "data")


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
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_loadable(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_loadable(k, f"{where} key")
            check_loadable(v, f"{where}[{k!r}]")
    elif not isinstance(value, (torch.Tensor, int, float, str, bool, type(None))):
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


class Misfit(Exception):
    """What in a checkpoint does not fit (the message names it)."""


def check(ckpt: dict[str, Any], path: Path, template: ServerState, data_digest: str | None,
          rounds: int, eval_every: int, same_config: Callable[[dict], None]) -> None:
    """Raise a UserError naming the first part of ``ckpt`` that does not fit this run: its
    fields, its configuration (``same_config`` raises its own error), data digest, state
    (``template``: each tensor's dtype and shape), round, rows and RNG states."""
    try:
        _same_keys(set(ckpt), set(FIELDS), "field", "")
        if not isinstance(ckpt["config"], dict):
            raise Misfit("its config is not a mapping")
        same_config(ckpt["config"])
        if data_digest is not None and ckpt["data"] != data_digest:
            raise Misfit("it was trained on other data (the samples, labels or partition differ: "
                         "another data_dir or changed dataset files); resume it on the data it was "
                         "trained on")
        saved = ckpt["state"]
        if not isinstance(saved, dict):
            raise Misfit("its state is not a mapping of fields")
        want = state_to_dict(template)
        _same_keys(set(saved), set(want), "state field", f" of {type(template).__name__}")
        for name, ref in want.items():
            _fits(saved[name], ref, f"state.{name}", strict=False)
        w = saved["w"]
        if w.is_floating_point() and not bool(torch.isfinite(w).all()):
            raise Misfit("its weights state.w are not finite")
        rnd = ckpt["round"]
        if isinstance(rnd, bool) or not isinstance(rnd, int) or not 0 <= rnd <= rounds:
            raise Misfit(f"round {rnd!r} is not a round of this run (0..{rounds})")
        if saved["round"] != rnd:
            raise Misfit(f"round {rnd} differs from its state's round {saved['round']!r}")
        _check_rows(ckpt["rows"], rnd, rounds, eval_every)
        rng = ckpt["rng"]
        if not isinstance(rng, dict):
            raise Misfit("rng is not a mapping of generator states")
        rng_template = {k: v for k, v in rng_state().items() if k != "cuda"}
        _same_keys(set(rng) - {"cuda"}, set(rng_template), "RNG state", "")
        for name, ref in rng_template.items():
            _fits(rng[name], ref, f"rng.{name}", strict=True)
        if "cuda" in rng and not (isinstance(rng["cuda"], (list, tuple))
                                  and all(isinstance(t, torch.Tensor) for t in rng["cuda"])):
            raise Misfit("rng.cuda is not a list of CUDA generator states")
        t = ckpt["elapsed_s"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise Misfit(f"elapsed_s={t!r} is not a non-negative number of seconds")
    except Misfit as e:
        raise UserError(f"checkpoint {path} does not fit this run: {e}; delete it or run with "
                        "resume=false to start over") from None


def _same_keys(have: set, want: set, what: str, where: str) -> None:
    missing, unknown = sorted(want - have, key=str), sorted(have - want, key=str)
    if missing:
        raise Misfit(f"it has no {what} {missing[0]!r}{where} (written by another fedmoo "
                     "version, or damaged)")
    if unknown:
        raise Misfit(f"it has an unknown {what} {unknown[0]!r}{where}")


# what a value is, in a Misfit's words (bool before number: a bool is an int)
KINDS = ((torch.Tensor, "tensor"), (bool, "bool"), ((int, float), "number"),
         ((list, tuple), "sequence"))


def _kind(v: Any) -> str:
    return next((name for types, name in KINDS if isinstance(v, types)), type(v).__name__)


def _fits(value: Any, ref: Any, where: str, strict: bool) -> None:
    """``value`` has the kind of ``ref``; a tensor its dtype and shape. ``strict``: sequences
    of the same length, element by element (RNG states); else a None ``ref`` (a field the
    algorithm fills later) takes anything and sequences / mappings are not looked into."""
    if ref is None:
        if strict and value is not None and _kind(value) != "number":
            raise Misfit(f"{where} is a {_kind(value)}, not a number or None")
        return
    if _kind(value) != _kind(ref):
        raise Misfit(f"{where} is a {_kind(value)} where this run has a {_kind(ref)}")
    if isinstance(ref, torch.Tensor):
        if value.dtype != ref.dtype or value.shape != ref.shape:
            raise Misfit(f"{where} is a {value.dtype} tensor of shape {list(value.shape)} where "
                         f"this run has {ref.dtype} of shape {list(ref.shape)}")
    elif isinstance(ref, (list, tuple)) and strict:
        if len(value) != len(ref):
            raise Misfit(f"{where} has {len(value)} entries where this run has {len(ref)}")
        for i, (v, r) in enumerate(zip(value, ref)):
            _fits(v, r, f"{where}[{i}]", strict)


def _check_rows(rows: Any, rnd: int, rounds: int, eval_every: int) -> None:
    """One row per round the run evaluates up to ``rnd``, in order, each fit for rounds.csv
    (``_check_row``): the rows are written there as they are."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise Misfit("rows is not a list of rounds.csv rows")
    for i, row in enumerate(rows):
        _check_row(row, rows[i - 1] if i else {}, i + 1)
    have = [r.get("round") for r in rows]
    want = [t for t in range(1, rnd + 1) if t % eval_every == 0 or t == rounds]
    if have != want:
        raise Misfit(f"its rows are of rounds {_span(have)} where round {rnd} with "
                     f"eval_every={eval_every} has rows of rounds {_span(want)}")


def _check_row(row: dict, before: dict, n: int) -> None:
    """Row ``n``: an integer round, every column an earlier row has, names that are one line of
    text, and numbers that are finite or NaN (a metric without a value, written ``nan``)."""
    where = f"its row {n}"
    lost = [k for k in before if k not in row]
    if lost:
        raise Misfit(f"{where} has no column {lost[0]!r}, which row {n - 1} has")
    for k, v in row.items():
        if not isinstance(k, str) or not k.isprintable() or not k.strip():
            raise Misfit(f"{where} has a column named {k!r:.60}")
        number = isinstance(v, int) if k == "round" else isinstance(v, (int, float))
        if isinstance(v, bool) or not number or math.isinf(v):
            kind = "an integer" if k == "round" else "a finite number or NaN"
            raise Misfit(f"{where} holds {v!r:.60} in column {k!r}, not {kind}")


def _span(rounds: list) -> str:
    if not rounds:
        return "(none)"
    return str(rounds) if len(rounds) <= 4 else f"[{rounds[0]}, {rounds[1]}, ..., {rounds[-1]}]"
