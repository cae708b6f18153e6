"""Whether a checkpoint fits the run that wants to resume from it.

A checkpoint is checked whole against the run's own live state before anything in it is used:
its fields (no missing, no unknown one), the data it was trained on (``FederatedData.digest``),
the algorithm state's fields and each tensor's dtype and shape (the run's ``algo.init`` state is
the template), the RNG states (the structure of this process's own), the round (the state's,
within the run's rounds) and the rows (exactly the rounds the run evaluates up to it, each with
the columns of the row before it and numbers only: they go to rounds.csv as they are). The
first thing that does not fit is named in one line (a UserError); nothing is restored from a
checkpoint that does not fit. The configuration itself is compared by RunDir (config_diff).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from fedmoo.errors import UserError
from fedmoo.state import ServerState, state_to_dict

FIELDS = ("format", "round", "state", "rows", "rng", "config", "elapsed_s", "data")


class Misfit(Exception):
    """What in a checkpoint does not fit (the message names it)."""


def check_fields(ckpt: dict[str, Any], path: Path) -> None:
    """The checkpoint has exactly the fields this version writes, its config a mapping (so the
    configurations can be compared before the rest)."""
    _refuse(path, _fields, ckpt)


def check(ckpt: dict[str, Any], path: Path, template: ServerState, rng_template: dict[str, Any],
          data_digest: str | None, rounds: int, eval_every: int) -> None:
    """Raise a UserError naming the first part of ``ckpt`` that does not fit this run."""
    _refuse(path, _check, ckpt, template, rng_template, data_digest, rounds, eval_every)


def _refuse(path: Path, fn, *args) -> None:
    try:
        fn(*args)
    except Misfit as e:
        raise UserError(f"checkpoint {path} does not fit this run: {e}; delete it or run with "
                        "resume=false to start over") from None


def _fields(ckpt) -> None:
    _same_keys(set(ckpt), set(FIELDS), "field", "")
    if not isinstance(ckpt["config"], dict):
        raise Misfit("its config is not a mapping")


def _check(ckpt, template, rng_template, data_digest, rounds, eval_every) -> None:
    _fields(ckpt)
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
    _same_keys(set(rng) - {"cuda"}, set(rng_template) - {"cuda"}, "RNG state", "")
    for name, ref in rng_template.items():
        if name != "cuda":
            _fits(rng[name], ref, f"rng.{name}", strict=True)
    if "cuda" in rng and not (isinstance(rng["cuda"], (list, tuple))
                              and all(isinstance(t, torch.Tensor) for t in rng["cuda"])):
        raise Misfit("rng.cuda is not a list of CUDA generator states")
    t = ckpt["elapsed_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise Misfit(f"elapsed_s={t!r} is not a non-negative number of seconds")


def _same_keys(have: set, want: set, what: str, where: str) -> None:
    missing, unknown = sorted(want - have, key=str), sorted(have - want, key=str)
    if missing:
        raise Misfit(f"it has no {what} {missing[0]!r}{where} (written by another fedmoo "
                     "version, or damaged)")
    if unknown:
        raise Misfit(f"it has an unknown {what} {unknown[0]!r}{where}")


def _kind(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return "tensor"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, (list, tuple)):
        return "sequence"
    return type(v).__name__


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
