"""Checks of a run: its knobs before any work starts, and divergence after every update."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmoo.errors import DivergenceError, UserError


def _int(cfg: dict, key: str, lo: int, what: str, allow_null: bool = False) -> int | None:
    v = cfg.get(key)
    if v is None and allow_null:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        null = " or null" if allow_null else ""
        raise UserError(f"{key}={v!r} must be {what}{null}; e.g. {key}={max(lo, 1)}")
    return v


def _number(cfg: dict, key: str, lo: float, lo_open: bool, hi: float | None = None,
            hi_open: bool = False, example: str = "") -> float:
    v = cfg.get(key)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok:
        ok = (v > lo if lo_open else v >= lo) and (hi is None or (v < hi if hi_open else v <= hi))
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {'inf' if hi is None else hi}{')' if hi_open or hi is None else ']'}"
        raise UserError(f"{key}={v!r} must be a number in {rng}; e.g. {key}={example}")
    return float(v)


SECTIONS = ("data", "partition", "model", "client", "algo")
SEED_LIMIT = 2**63   # seeds go to numpy and torch as signed 64-bit integers
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def check_seeds(node: Any, path: str = "") -> None:
    """Every ``seed`` / ``*_seed`` key, at any depth: an integer in [0, 2**63)."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        where = f"{path}{key}"
        if isinstance(value, dict):
            check_seeds(value, where + ".")
        elif (key == "seed" or str(key).endswith("_seed")) and value is not None and (
                isinstance(value, bool) or not isinstance(value, int)
                or not 0 <= value < SEED_LIMIT):
            raise UserError(f"{where}={value!r} must be a non-negative integer below 2**63; "
                            f"e.g. {where}=0")


def check_finite(node: Any, path: str = "") -> None:
    """Every number in the config, at any depth (lists included), is finite: ``nan`` or ``inf``
    is never a setting (``partition.beta=nan`` would draw NaN proportions)."""
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, (list, tuple)) else ()
    for key, value in items:
        where = f"{path}[{key}]" if isinstance(node, (list, tuple)) else \
            f"{path}.{key}" if path else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{where}={value} is not a finite number; give it a number "
                            "(`fedmoo run --cfg job` shows the defaults)")
        check_finite(value, where)


# groups where a key with a numeric default may also take a name (attack.malicious=phd); their
# components check those values themselves
TEXT_OK = ("algo.", "attack.")


@functools.lru_cache(maxsize=None)
def _shipped(path: Path) -> dict:
    """A shipped YAML file of fedmoo's conf (read once per process: a sweep checks each job)."""
    import yaml

    try:
        out = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return out if isinstance(out, dict) else {}


def check_types(cfg: dict) -> None:
    """A value must have the kind of its shipped default: where fedmoo's own YAML for the chosen
    option (conf/<group>/<name>.yaml, conf/config.yaml) has a boolean, the value must be true or
    false (``maybe`` is not read as true); where it has a number, the value must not be text."""
    pairs = [("", cfg, _shipped(CONF_DIR / "config.yaml"))]
    for group in (*SECTIONS, "attack"):
        node = cfg.get(group)
        name = node.get("name") if isinstance(node, dict) else None
        if isinstance(name, str) and "/" not in name and ".." not in name:
            shipped = _shipped(CONF_DIR / group / f"{name}.yaml")
            if isinstance(shipped.get(group), dict):   # a `@package _global_` file
                shipped = shipped[group]
            pairs.append((f"{group}.", node, shipped))
    for prefix, node, default in pairs:
        for key, ref in default.items():
            if key not in node or key == "defaults":
                continue
            value = node[key]
            if isinstance(ref, bool) and not isinstance(value, bool):
                raise UserError(f"{prefix}{key}={value!r} must be true or false")
            if (isinstance(ref, (int, float)) and not isinstance(ref, bool)
                    and isinstance(value, str) and prefix not in TEXT_OK):
                raise UserError(f"{prefix}{key}={value!r} must be a number; e.g. {prefix}{key}={ref}")


def cohort_size(num_clients: int, clients_per_round: int | None) -> int:
    """``clients_per_round`` against the number of clients (null = all of them)."""
    k = num_clients if clients_per_round is None else clients_per_round
    if k > num_clients:
        raise UserError(f"clients_per_round={k} is larger than num_clients={num_clients}; "
                        f"set clients_per_round<={num_clients} (or null for all)")
    return k


def check_config(cfg: dict) -> tuple[int | None, int | None]:
    """Validate the run knobs and the local optimiser; returns (num_clients, clients_per_round).

    ``num_clients: null`` means the dataset's own clients (partition=natural): it is then None
    here, clients_per_round is returned as given, and the run checks both once the federation
    tells the count (``cohort_size``)."""
    missing = [s for s in SECTIONS if not isinstance(cfg.get(s), dict)]
    if missing:
        raise UserError(f"the config has no {missing[0]} section (removed with ~{missing[0]}?); "
                        f"every run needs one: {missing[0]}=<name> (see `fedmoo list {missing[0]}`)")
    check_seeds(cfg)
    if cfg.get("loss_threshold") is not None:
        _number(cfg, "loss_threshold", 0.0, False, example="0.01")
    _int(cfg, "rounds", 1, "a positive integer")
    n = _int(cfg, "num_clients", 1, "a positive integer (null = the dataset's own clients)",
             allow_null=True)
    _int(cfg, "eval_every", 1, "a positive integer (evaluate every this many rounds)")
    _int(cfg, "checkpoint_every", 0, "a non-negative integer (0 = no periodic checkpoint)")
    if cfg.get("log_clients_every") is not None:
        _int(cfg, "log_clients_every", 0, "a non-negative integer (0 = no clients_rounds.csv)")
    k = _int(cfg, "clients_per_round", 1, "a positive integer", allow_null=True)
    if n is not None:
        k = cohort_size(n, k)
    if cfg.get("sampling", "uniform") not in ("uniform", "weighted"):
        raise UserError(f"sampling={cfg.get('sampling')!r} must be uniform or weighted "
                        "(clients drawn with probability proportional to their training samples)")
    if cfg.get("eval_split", "test") not in ("test", "val"):
        raise UserError(f"eval_split={cfg.get('eval_split')!r} must be test or val")
    if cfg.get("diverge_norm") is not None:
        _number(cfg, "diverge_norm", 0.0, True, example="1e6 (or null for NaN/inf only)")
    if cfg.get("resume", False) not in (True, False):
        raise UserError(f"resume={cfg.get('resume')!r} must be true or false")
    c = {f"client.{k}": v for k, v in cfg["client"].items()}
    _number(c, "client.lr", 0.0, True, example="0.01")
    for key in ("client.batch_size", "client.local_steps"):
        if key in c:
            _int(c, key, 1, "a positive integer", allow_null=True)
    if "client.epochs" in c:
        _int(c, "client.epochs", 1, "a positive integer")
    if "client.momentum" in c:
        _number(c, "client.momentum", 0.0, False, 1.0, hi_open=True, example="0.9")
    if "client.weight_decay" in c:
        _number(c, "client.weight_decay", 0.0, False, example="0.0001")
    check_finite(cfg)  # after the knobs above, whose messages say more
    check_types(cfg)
    return n, k


def check_diverged(w, losses, round_done: int,
                   cfg: dict[str, Any], updates: torch.Tensor | None = None) -> None:
    """Raise DivergenceError if a model, the clients' losses (a tensor, or a list of the
    reported ones) or their ``updates`` are not finite, or a model's norm exceeds
    ``diverge_norm``. ``w``: the global model, or ``{name: model}`` of every model whose numbers
    the run reports (``reported_models``, keys as a message names them; a ``[N, d]`` model is one model per client, each
    checked). Norms are taken in float64, so a float32 model past 1.8e19 is not read as
    infinite."""
    limit = cfg.get("diverge_norm")
    models = {"the global model": w} if isinstance(w, torch.Tensor) else w
    norms = {name: _norm(m) for name, m in models.items()}
    fix = _fix(cfg)
    losses = [] if losses is None else [losses] if isinstance(losses, torch.Tensor) else losses
    bad = [name for name, n in norms.items() if not np.isfinite(n)]
    big = [name for name, n in norms.items() if limit is not None and n > float(limit)]
    if bad:
        what = f"{bad[0]} is not finite"
    elif not all(bool(torch.isfinite(v).all()) for v in losses if v is not None):
        what = "the clients' training loss is not finite"
    elif updates is not None and not bool(torch.isfinite(updates).all()):
        what = "a client's update is not finite (it overflowed in local training)"
    elif big:
        what = f"{big[0]}'s norm {norms[big[0]]:.3g} exceeds diverge_norm={float(limit):g}"
    else:
        return
    raise DivergenceError(f"training diverged in round {round_done}: {what}; {fix}")


def _fix(cfg: dict[str, Any]) -> str:
    return (f"lower client.lr (now {cfg['client']['lr']}) or the server step size, or check the "
            "algo.* and attack settings")


def _norm(w: torch.Tensor) -> float:
    """The L2 norm of a model ``[d]``; the largest of a model per client ``[N, d]``."""
    norms = torch.linalg.vector_norm(w, dim=-1, dtype=torch.float64)
    return float(norms.max()) if norms.numel() else 0.0


def reported_models(algo, state) -> dict[str, torch.Tensor]:
    """Every model whose numbers a run reports: the global model, the model(s) it evaluates
    (``algo.eval_params``: Ditto's personal models) and the algorithm's extra ones."""
    out = {"the global model": state.w}
    params = algo.eval_params(state)
    if params is not state.w:
        out["the evaluated model" if params.dim() == 1 else "a per-client model"] = params
    for name, extra in algo.extra_eval_params(state).items():
        out[f"the {name} model"] = extra
    return out


def check_row(row: dict[str, Any], round_done: int, cfg: dict[str, Any]) -> None:
    """The losses an evaluated row reports are numbers: a finite model whose logits overflow
    reports NaN, which is divergence, not a result."""
    bad = [k for k, v in row.items() if "loss" in k.split("/")[-1]
           and isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise DivergenceError(f"training diverged in round {round_done}: {bad[0]} is not "
                              f"finite; {_fix(cfg)}")
