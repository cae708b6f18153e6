"""The round loop. It never branches on algorithm names (DESIGN.md, "Data flow of one round")."""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedmoo
from fedmoo import algorithms, attacks, data as fdata, engine as fengine, loggers, models
from fedmoo.engine.common import round_seed
from fedmoo.engine.evaluate import TaskEvaluator, evaluate_clients
from fedmoo.errors import DivergenceError, UserError
from fedmoo.metrics import accuracy_metrics
from fedmoo.params import get_flat, num_params
from fedmoo.results import RoundsWriter, write_csv, write_json


@dataclass
class RunResult:
    run_dir: Path
    status: str
    final: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0


def resolve_device(name: str) -> torch.device:
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name} but CUDA is not available here; use device=cpu or device=auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"device={name!r} is not valid; use auto, cpu, cuda or cuda:N") from None


class ClientSampler:
    """Uniform sampling without replacement, seeded per round so any round can be replayed."""

    def __init__(self, num_clients: int, per_round: int, seed: int):
        self.n, self.k, self.seed = num_clients, per_round, seed

    def sample(self, round_idx: int) -> torch.Tensor:
        if self.k >= self.n:
            return torch.arange(self.n)
        rng = np.random.default_rng([self.seed, round_idx, 7])
        return torch.from_numpy(np.sort(rng.choice(self.n, self.k, replace=False))).long()


def _positive_int(cfg: dict, key: str, allow_zero: bool = False) -> int:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if allow_zero else 1):
        need = "a non-negative" if allow_zero else "a positive"
        raise UserError(f"{key}={v!r} must be {need} integer")
    return v


def check_config(cfg: dict) -> tuple[int, int]:
    """Validate the run knobs; returns (num_clients, clients_per_round)."""
    _positive_int(cfg, "rounds")
    n = _positive_int(cfg, "num_clients")
    _positive_int(cfg, "eval_every")
    _positive_int(cfg, "checkpoint_every", allow_zero=True)
    k = cfg.get("clients_per_round")
    if k is None:
        k = n
    elif isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"clients_per_round={k!r} must be a positive integer or null (all clients)")
    if k > n:
        raise UserError(f"clients_per_round={k} is larger than num_clients={n}; "
                        f"set clients_per_round<={n} (or null for all)")
    c = cfg["client"]
    lr = c.get("lr")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or lr <= 0:
        raise UserError(f"client.lr={lr!r} must be a positive number")
    if cfg.get("eval_split", "test") not in ("test", "val"):
        raise UserError(f"eval_split={cfg.get('eval_split')!r} must be test or val")
    return n, k


def _versions() -> dict[str, str]:
    return {"fedmoo": fedmoo.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def run(cfg: dict[str, Any], run_dir: str | Path) -> RunResult:
    """Run one federated training job described by a resolved config mapping."""
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    num_clients, per_round = check_config(cfg)
    device = resolve_device(cfg.get("device", "auto"))
    seed = int(cfg["seed"])

    algo = algorithms.build(cfg["algo"])
    algo.check_run(num_clients, per_round)
    attack = attacks.build(cfg.get("attack") or {"name": "none"}, num_clients)

    federation = fdata.load_federated(cfg["data"], cfg["partition"], num_clients, cfg["data_dir"])
    federation.save_partition(run_dir / "partition.npz")
    federation = federation.to(device)
    eval_split = cfg.get("eval_split", "test")
    if eval_split == "val" and federation.val is None:
        raise UserError("eval_split=val needs a validation split: set partition.split=pooled")

    torch.manual_seed(seed)
    model = models.build(cfg["model"], federation.input_shape, federation.num_classes,
                         federation.num_tasks).to(device)
    engine = fengine.build(cfg.get("engine", "sequential"), model, federation, cfg["client"])
    state = algo.init(get_flat(model), num_clients=num_clients)
    tasks = (TaskEvaluator(model, federation, state.w, cfg.get("loss_threshold", 0.01))
             if federation.num_tasks else None)
    sampler = ClientSampler(num_clients, per_round, seed)
    writer = RoundsWriter(run_dir / "rounds.csv")
    tracker = loggers.build(cfg.get("logger"), run_dir)

    rounds, eval_every = int(cfg["rounds"]), int(cfg["eval_every"])
    status, final = "completed", {}
    last_eval_t, last_eval_round = time.perf_counter(), 0
    bar = _progress(rounds, f"{algo.name} on {cfg['data']['name']}", cfg.get("progress", True))
    try:
        for t in range(state.round, rounds):
            rs = round_seed(seed, t)
            torch.manual_seed(rs)
            ids = sampler.sample(t)
            cohort = engine.train(ids.to(device), state.w, algo.client_spec(state, ids), rs)
            cohort = attack.apply(cohort)
            state, diag = algo.server_update(state, cohort)
            _check_finite(state.w, cohort.loss_before, t + 1)
            done = t + 1
            if done % eval_every == 0 or done == rounds:
                now = time.perf_counter()
                row = {"round": done}
                row.update(_evaluate(algo, state, model, federation, eval_split, tasks))
                row["train/loss_mean"] = float(cohort.loss_before.mean())
                row.update(diag)
                row["time/round_s"] = (now - last_eval_t) / (done - last_eval_round)
                row["time/elapsed_s"] = now - t_start
                last_eval_t, last_eval_round = now, done
                writer.log(row)
                tracker.log(row)
                final = row
                bar.set_postfix_str(f"acc {row.get('test/acc_mean', float('nan')):.2f} "
                                    f"std {row.get('test/acc_std', float('nan')):.2f}")
            bar.update(1)
    except DivergenceError as e:
        status = "diverged"
        final = {**final, **(tasks.summary(writer.rows) if tasks else {})}
        _finish(run_dir, cfg, algo, model, federation, state, eval_split, status, final, t_start,
                device, write_clients=False, message=str(e))
        bar.close()
        tracker.close()
        raise
    bar.close()
    tracker.close()
    final = {**final, **(tasks.summary(writer.rows) if tasks else {})}
    wall = _finish(run_dir, cfg, algo, model, federation, state, eval_split, status, final,
                   t_start, device)
    return RunResult(run_dir=run_dir, status=status, final=final, rows=writer.rows, wall_time_s=wall)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="round", file=sys.stderr, disable=not enabled,
                dynamic_ncols=True)


def _check_finite(w: torch.Tensor, losses: torch.Tensor | None, round_done: int) -> None:
    bad_w = not bool(torch.isfinite(w).all())
    bad_l = losses is not None and not bool(torch.isfinite(losses).all())
    if bad_w or bad_l:
        what = "global model" if bad_w else "client training loss"
        raise DivergenceError(
            f"training diverged in round {round_done}: the {what} is not finite; "
            "lower client.lr or the server step size (algo.eta)"
        )


def _evaluate(algo, state, model, federation, split: str, tasks=None) -> dict[str, float]:
    def metrics(ev, prefix):
        if tasks is not None:     # multi-task data: per-task columns
            return tasks.split_metrics(ev, federation, prefix)
        return accuracy_metrics(ev.acc, ev.correct, ev.count, ev.loss, prefix=prefix)

    ev = evaluate_clients(model, federation, split, algo.eval_params(state))
    out = metrics(ev, "test" if split == "test" else "val")
    for name, params in algo.extra_eval_params(state).items():
        out.update(metrics(evaluate_clients(model, federation, split, params), name))
    if tasks is not None:
        out.update(tasks.train_metrics(model, federation, algo.eval_params(state)))
    return out


def _task_columns(ev, k: int) -> dict[str, float]:
    """Per-task accuracy and loss of client k on multi-task data (``accuracy`` / ``loss`` are then
    the means over all tasks)."""
    if ev.loss.ndim == 1:
        return {}
    return {f"task{t}_{name}": float(v[k, t]) for t in range(ev.loss.shape[1])
            for name, v in (("accuracy", ev.acc), ("loss", ev.loss))}


def _finish(run_dir, cfg, algo, model, federation, state, split, status, final, t_start, device,
            write_clients: bool = True, message: str | None = None) -> float:
    if write_clients:
        ev = evaluate_clients(model, federation, split, algo.eval_params(state))
        tr = federation.train.sizes.cpu().numpy()
        te = federation.split(split).sizes.cpu().numpy()
        names = federation.client_names
        rows = [
            {"client": k, **({"name": names[k]} if names else {}), "num_train": int(tr[k]),
             f"num_{split}": int(te[k]), "accuracy": float(np.mean(ev.acc[k])),
             "loss": float(np.mean(ev.loss[k])), **_task_columns(ev, k)}
            for k in range(federation.num_clients)
        ]
        write_csv(run_dir / "clients.csv", rows)
    wall = time.perf_counter() - t_start
    summary = {
        "status": status,
        "message": message,
        "rounds_completed": int(state.round),
        "final": final,
        "wall_time_s": wall,
        "algorithm": repr(algo),
        "algo": algo.name,
        "hparams": algo.hparams(),
        "data": cfg["data"]["name"],
        "model": cfg["model"]["name"],
        "num_params": num_params(model),
        "num_clients": federation.num_clients,
        "tasks": federation.task_names,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "versions": _versions(),
    }
    write_json(run_dir / "summary.json", summary)
    return wall
