"""The round loop. It never branches on algorithm names (DESIGN.md, "Data flow of one round").

Reliability (docs/troubleshooting.md): a run checkpoints every ``checkpoint_every`` rounds and on
SIGTERM/SIGINT, continues from ``checkpoint.pt`` when started again in the same run directory,
skips a run directory that already holds this run's finished result, and stops with
``status: diverged`` when the model stops being finite or its norm explodes.
"""

from __future__ import annotations

import contextlib

import math
import platform
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedmoo
from fedmoo import algorithms, attacks, checkpoint, loggers, models
from fedmoo import data as fdata
from fedmoo import engine as fengine
from fedmoo.engine.common import round_seed
from fedmoo.engine.evaluate import ClientEval, TaskEvaluator, evaluate_clients, improved_fraction
from fedmoo.errors import DivergenceError, RunInterrupted, UserError
from fedmoo.metrics import accuracy_metrics, group_metrics
from fedmoo.params import get_flat, num_params, set_flat
from fedmoo.results import ClientsRoundsWriter, RoundsWriter, read_summary, to_jsonable, write_csv, write_json

# Files a run writes; ``resume=false`` deletes them before starting over.
RESULT_FILES = ("summary.json", "rounds.csv", "clients.csv", "model.pt", checkpoint.FILENAME,
                "partition.npz", "attack.json")
FINISHED = ("completed", "diverged")


@dataclass
class RunResult:
    run_dir: Path
    status: str
    final: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0
    resumed_from: int = 0   # round the run continued from (0: fresh start)
    skipped: bool = False   # the run directory already held this run's completed result


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
    """Uniform sampling without replacement, seeded per round so any round can be replayed.

    ``forced`` clients (e.g. attackers with ``attack.always_participate``) are in every cohort;
    the remaining ``per_round - len(forced)`` places are drawn from the other clients.
    """

    def __init__(self, num_clients: int, per_round: int, seed: int, forced=()):
        self.n, self.k, self.seed = num_clients, per_round, seed
        self.forced = np.asarray(forced, dtype=np.int64).reshape(-1)
        if self.forced.size > per_round:
            raise UserError(f"{self.forced.size} clients must join every round "
                            f"(attack.always_participate=true) but clients_per_round={per_round}; "
                            f"set clients_per_round>={self.forced.size} or null")

    def sample(self, round_idx: int) -> torch.Tensor:
        if self.k >= self.n:
            return torch.arange(self.n)
        rng = np.random.default_rng([self.seed, round_idx, 7])
        if not self.forced.size:
            return torch.from_numpy(np.sort(rng.choice(self.n, self.k, replace=False))).long()
        rest = np.setdiff1d(np.arange(self.n), self.forced)
        picks = rng.choice(rest, self.k - self.forced.size, replace=False)
        return torch.from_numpy(np.sort(np.concatenate([self.forced, picks]))).long()


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
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
    if ok:
        ok = (v > lo if lo_open else v >= lo) and (hi is None or (v < hi if hi_open else v <= hi))
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {'inf' if hi is None else hi}{')' if hi_open or hi is None else ']'}"
        raise UserError(f"{key}={v!r} must be a number in {rng}; e.g. {key}={example}")
    return float(v)


def check_config(cfg: dict) -> tuple[int, int]:
    """Validate the run knobs and the local optimiser; returns (num_clients, clients_per_round)."""
    _int(cfg, "seed", 0, "a non-negative integer")
    _int(cfg, "rounds", 1, "a positive integer")
    n = _int(cfg, "num_clients", 1, "a positive integer")
    _int(cfg, "eval_every", 1, "a positive integer (evaluate every this many rounds)")
    _int(cfg, "checkpoint_every", 0, "a non-negative integer (0 = no periodic checkpoint)")
    if cfg.get("log_clients_every") is not None:
        _int(cfg, "log_clients_every", 0, "a non-negative integer (0 = no clients_rounds.csv)")
    k = _int(cfg, "clients_per_round", 1, "a positive integer", allow_null=True)
    if k is None:
        k = n
    if k > n:
        raise UserError(f"clients_per_round={k} is larger than num_clients={n}; "
                        f"set clients_per_round<={n} (or null for all)")
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
    return n, k


def _versions() -> dict[str, str]:
    return {"fedmoo": fedmoo.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run directory and make sure files can be written there (else a UserError)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".fedmoo-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"output directory {run_dir} is not writable ({e.strerror or e}); "
                        "set hydra.run.dir (or hydra.sweep.dir) to a writable path") from None


def previous_result(run_dir: Path, cfg: dict[str, Any]) -> RunResult | None:
    """This run's finished result if ``run_dir`` already holds it (a re-run skips the work).

    A completed run returns its result; a diverged one raises its DivergenceError again; a
    finished run of another configuration is a UserError (never mix two runs in one directory).
    """
    summary = read_summary(run_dir / "summary.json")
    if summary is None or summary.get("status") not in FINISHED:
        return None
    _same_config(summary.get("config") or {}, to_jsonable(checkpoint.run_config(cfg)), run_dir,
                 summary["status"])
    if summary["status"] == "diverged":
        raise DivergenceError(f"{summary.get('message')} (recorded by an earlier run in "
                              f"{run_dir}; resume=false runs it again)")
    return RunResult(run_dir=run_dir, status="completed", final=summary.get("final") or {},
                     wall_time_s=float(summary.get("wall_time_s") or 0.0), skipped=True)


def _same_config(old: dict, new: dict, run_dir: Path, what: str) -> None:
    diff = checkpoint.config_diff(old, new)
    if diff:
        raise UserError(f"{run_dir} already holds a {what} run of another configuration ({diff}); "
                        "use another hydra.run.dir / hydra.sweep.dir, or resume=false to discard it")


def discard_previous(run_dir: Path) -> None:
    for name in RESULT_FILES:
        (run_dir / name).unlink(missing_ok=True)


def build_model(cfg: dict[str, Any], federation) -> torch.nn.Module:
    """Build the model for the federation's inputs and run it on one training sample (on the
    CPU, before moving anything), so a model made for other data fails here, in one line that
    names both, rather than with a shape error deep inside the first round."""
    m, d = cfg["model"].get("name"), cfg["data"].get("name")
    shape, classes = tuple(federation.input_shape), federation.num_classes

    def mismatch(e: Exception) -> UserError:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return UserError(f"model={m} does not fit data={d} (inputs of shape {list(shape)}, "
                         f"{classes} classes): {msg}; choose a model made for {d} "
                         "(see `fedmoo list model`)")

    try:
        model = models.build(cfg["model"], shape, classes, federation.num_tasks)
    except (ValueError, RuntimeError, IndexError) as e:
        raise mismatch(e) from e
    model.eval()
    try:
        with torch.no_grad():
            out = model(federation.x[federation.train.index[:1].cpu()].cpu())
    except (RuntimeError, ValueError, IndexError) as e:
        raise mismatch(e) from e
    finally:
        model.train()
    if federation.task == "classification" and federation.y.dim() == 1 and (
            out.dim() != 2 or out.shape[1] != classes):
        raise mismatch(ValueError(f"it outputs shape {list(out.shape[1:])} per sample"))
    return model


class StopSignals:
    """On SIGTERM / SIGINT remember the signal so the loop checkpoints and stops at a round
    boundary; a second signal stops at once. Only the main thread can install handlers."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        print(f"fedmoo: {signal.Signals(signum).name} received: saving a checkpoint at the end of "
              "this round (send it again to stop at once)", file=sys.stderr, flush=True)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)


SMALL_MODEL = 100_000  # below this many parameters, CPU threads cost more than they give


def set_threads(threads: Any, model_params: int) -> None:
    """``threads``: a count, or ``auto`` = one thread for small models (intra-op threading
    only adds overhead there; measured 15x slower on a busy 2-core machine), torch's default
    otherwise."""
    if threads in (None, "auto"):
        if model_params < SMALL_MODEL:
            torch.set_num_threads(1)
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UserError(f"threads={threads!r} must be a positive integer or auto")
    torch.set_num_threads(threads)


def run(cfg: dict[str, Any], run_dir: str | Path) -> RunResult:
    """Run one federated training job described by a resolved config mapping."""
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    num_clients, per_round = check_config(cfg)
    prepare_run_dir(run_dir)
    resume = bool(cfg.get("resume", False))
    if resume:
        done = previous_result(run_dir, cfg)
        if done is not None:
            return done
    else:
        discard_previous(run_dir)
    device = resolve_device(cfg.get("device", "auto"))
    seed = int(cfg["seed"])

    algo = algorithms.build(cfg["algo"])
    algo.check_run(num_clients, per_round)

    federation = _build({"data": cfg["data"], "partition": cfg["partition"]},
                        fdata.load_federated, cfg["data"], cfg["partition"], num_clients,
                        cfg["data_dir"])
    attack = attacks.build(cfg.get("attack") or {"name": "none"}, federation)
    write_json(run_dir / "attack.json", attack.describe())
    federation.save_partition(run_dir / "partition.npz")
    eval_split = cfg.get("eval_split", "test")
    if eval_split == "val" and federation.val is None:
        raise UserError("eval_split=val needs a validation split: set partition.split=pooled")

    torch.manual_seed(seed)
    model = build_model(cfg, federation).to(device)
    set_threads(cfg.get("threads", "auto"), num_params(model))
    federation = federation.to(device)
    engine = _build({"client": cfg["client"]}, fengine.build, cfg.get("engine", "auto"),
                    model, federation, cfg["client"])
    state = algo.init(get_flat(model), num_clients=num_clients)
    tasks = (TaskEvaluator(model, federation, state.w, cfg.get("loss_threshold", 0.01))
             if federation.num_tasks else None)

    rows: list[dict[str, Any]] = []
    elapsed0 = 0.0
    ckpt = checkpoint.load(run_dir, device) if resume else None
    if ckpt is not None:
        _same_config(ckpt["config"], checkpoint.run_config(cfg), run_dir, "checkpointed")
        state = checkpoint.restore_state(ckpt, state)
        rows, elapsed0 = ckpt["rows"], float(ckpt["elapsed_s"])
        checkpoint.set_rng_state(ckpt["rng"])
    resumed_from = int(state.round)
    sampler = ClientSampler(num_clients, per_round, seed, forced=attack.forced_clients)
    writer = RoundsWriter(run_dir / "rounds.csv", rows)
    tracker = loggers.build(cfg.get("logger"), run_dir)
    log_clients_every = int(cfg.get("log_clients_every") or 0)
    clients_log = (ClientsRoundsWriter(run_dir / "clients_rounds.csv", resumed_from)
                   if log_clients_every else None)
    track_improved = bool(cfg.get("track_improved", True))
    ctx = _Finisher(run_dir, cfg, algo, model, federation, eval_split, device, resumed_from,
                    engine.name)

    rounds, eval_every = int(cfg["rounds"]), int(cfg["eval_every"])
    ckpt_every = int(cfg.get("checkpoint_every") or 0)
    final = rows[-1] if rows else {}
    last_eval_t, last_eval_round = time.perf_counter(), resumed_from
    bar = _progress(rounds, resumed_from, f"{algo.name} on {cfg['data']['name']}",
                    cfg.get("progress", True))

    def elapsed() -> float:  # compute time of the run, over all its attempts
        return elapsed0 + time.perf_counter() - t_start

    with StopSignals() as stop, bar, contextlib.closing(tracker):
        for t in range(resumed_from, rounds):
            if stop.signum is not None:
                path = checkpoint.save(run_dir, state, writer.rows, cfg, elapsed())
                msg = (f"stopped by {signal.Signals(stop.signum).name} after round {t}; "
                       f"checkpoint saved to {path}; to continue, run the same command "
                       "again in the same directory (hydra.run.dir, or hydra.sweep.dir for -m)")
                ctx.summary("interrupted", state, final, elapsed(), msg)
                raise RunInterrupted(msg, stop.signum)
            rs = round_seed(seed, t)
            torch.manual_seed(rs)
            ids = sampler.sample(t)
            spec = attack.client_spec(algo.client_spec(state, ids), ids)
            trained = engine.train(ids.to(device), state.w, spec, rs)
            cohort = attack.apply(trained, rs)  # what the server sees
            try:
                check_diverged(state.w, cohort.loss_before, t + 1, cfg)  # before a rule reads them
                new_state, diag = algo.server_update(state, cohort)
                check_diverged(new_state.w, cohort.loss_before, t + 1, cfg)
            except DivergenceError as e:
                ctx.summary("diverged", state, final, elapsed(), str(e))
                raise
            state = new_state
            done = t + 1
            if done % eval_every == 0 or done == rounds:
                now = time.perf_counter()
                row = {"round": done}
                metrics, test_eval = _evaluate(algo, state, model, federation, eval_split,
                                               attack.groups(), tasks)
                row.update(metrics)
                row["train/loss_mean"] = float(cohort.loss_before.mean())
                if track_improved and not federation.num_tasks:  # measured, not reported, losses
                    row["round/improved_frac"] = improved_fraction(
                        model, federation, state.w, ids.to(device), trained.loss_before)
                row.update(diag)
                row["time/round_s"] = (now - last_eval_t) / (done - last_eval_round)
                row["time/elapsed_s"] = elapsed()
                last_eval_t, last_eval_round = now, done
                writer.log(row)
                tracker.log(row)
                final = row
                bar.set_postfix_str(f"acc {row.get('test/acc_mean', float('nan')):.2f} "
                                    f"std {row.get('test/acc_std', float('nan')):.2f}")
            if clients_log is not None and (done % log_clients_every == 0 or done == rounds):
                evaluated = test_eval if last_eval_round == done else None
                _log_clients(clients_log, done, algo, state, model, federation, eval_split,
                             evaluated)
            if ckpt_every and done % ckpt_every == 0 and done < rounds:
                checkpoint.save(run_dir, state, writer.rows, cfg, elapsed())
            bar.update(1)
    final = {**final, **(tasks.summary(writer.rows) if tasks else {})}
    wall = ctx.complete(state, final, elapsed())
    return RunResult(run_dir=run_dir, status="completed", final=final, rows=writer.rows,
                     wall_time_s=wall, resumed_from=resumed_from)


def _build(sections: dict[str, dict], fn, *args):
    """Build a component; an unknown keyword that comes from one of the config ``sections``
    (``{"client": cfg["client"]}``) becomes a UserError naming the key."""
    try:
        return fn(*args)
    except TypeError as e:
        msg = str(e)
        if "unexpected keyword argument" not in msg:
            raise
        bad = msg.rsplit("argument", 1)[1].strip(" '\"")
        section = next((k for k, v in sections.items() if bad in v), None)
        if section is None:
            raise
        name = sections[section].get("name")
        what = f"{section}={name}" if name else section
        raise UserError(f"{section}.{bad} is not a setting of {what}; remove it "
                        "(`fedmoo run --cfg job` shows the valid keys)") from None


def _progress(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="round", file=sys.stderr,
                disable=not enabled, dynamic_ncols=True)


def check_diverged(w: torch.Tensor, losses: torch.Tensor | None, round_done: int,
                   cfg: dict[str, Any]) -> None:
    """Raise DivergenceError if the model or the clients' loss is not finite, or ``||w||``
    exceeds ``diverge_norm``."""
    limit = cfg.get("diverge_norm")
    norm = float(torch.linalg.vector_norm(w.double()))
    fix = (f"lower client.lr (now {cfg['client']['lr']}) or the server step size, "
           f"or check the attack settings")
    if not np.isfinite(norm):
        what = "the global model is not finite"
    elif losses is not None and not bool(torch.isfinite(losses).all()):
        what = "the clients' training loss is not finite"
    elif limit is not None and norm > float(limit):
        what = f"the global model's norm {norm:.3g} exceeds diverge_norm={float(limit):g}"
    else:
        return
    raise DivergenceError(f"training diverged in round {round_done}: {what}; {fix}")


def _log_clients(writer, done, algo, state, model, federation, split: str, test=None) -> None:
    """One clients_rounds.csv block; ``test`` reuses this round's evaluation when there was one."""
    if test is None:
        test = evaluate_clients(model, federation, split, algo.eval_params(state))
    train = evaluate_clients(model, federation, "train", algo.eval_params(state))
    writer.log(done, test.acc, test.loss, train.loss)


def _evaluate(algo, state, model, federation, split: str, groups=None,
              tasks=None) -> tuple[dict[str, float], ClientEval]:
    """The round's metrics and the per-client evaluation of the reported model behind them."""
    def metrics(ev, prefix):
        if tasks is not None:     # multi-task data: per-task columns
            return tasks.split_metrics(ev, federation, prefix)
        return accuracy_metrics(ev.acc, ev.correct, ev.count, ev.loss, prefix=prefix)

    ev = evaluate_clients(model, federation, split, algo.eval_params(state))
    out = metrics(ev, "test" if split == "test" else "val")
    if tasks is None:
        for name, mask in (groups or {}).items():  # e.g. benign / attackers (attack.groups)
            out.update(group_metrics(ev.acc, ev.correct, ev.count, ev.loss, mask, prefix=name))
    for name, params in algo.extra_eval_params(state).items():
        out.update(metrics(evaluate_clients(model, federation, split, params), name))
    if tasks is not None:
        out.update(tasks.train_metrics(model, federation, algo.eval_params(state)))
    return out, ev


def _task_columns(ev, k: int) -> dict[str, float]:
    """Per-task accuracy and loss of client k on multi-task data (``accuracy`` / ``loss`` are then
    the means over all tasks)."""
    if ev.loss.ndim == 1:
        return {}
    return {f"task{t}_{name}": float(v[k, t]) for t in range(ev.loss.shape[1])
            for name, v in (("accuracy", ev.acc), ("loss", ev.loss))}


@dataclass
class _Finisher:
    """Writes the end-of-run files: summary.json always (last, atomically); on completion also
    clients.csv and model.pt, and the checkpoint is removed."""

    run_dir: Path
    cfg: dict[str, Any]
    algo: Any
    model: torch.nn.Module
    federation: Any
    split: str
    device: torch.device
    resumed_from: int
    engine: str

    def complete(self, state, final: dict[str, Any], wall: float) -> float:
        ev = evaluate_clients(self.model, self.federation, self.split, self.algo.eval_params(state))
        fed = self.federation
        tr = fed.train.sizes.cpu().numpy()
        te = fed.split(self.split).sizes.cpu().numpy()
        names = fed.client_names
        rows = [
            {"client": k, **({"name": names[k]} if names else {}), "num_train": int(tr[k]),
             f"num_{self.split}": int(te[k]), "accuracy": float(np.mean(ev.acc[k])),
             "loss": float(np.mean(ev.loss[k])), **_task_columns(ev, k)}
            for k in range(fed.num_clients)
        ]
        write_csv(self.run_dir / "clients.csv", rows)
        set_flat(self.model, state.w)
        checkpoint.save_model(self.run_dir / "model.pt", self.model)
        self.summary("completed", state, final, wall)
        (self.run_dir / checkpoint.FILENAME).unlink(missing_ok=True)
        return wall

    def summary(self, status: str, state, final: dict[str, Any], wall: float,
                message: str | None = None) -> None:
        device = self.device
        write_json(self.run_dir / "summary.json", {
            "status": status,
            "message": message,
            "rounds_completed": int(state.round),
            "resumed_from": self.resumed_from,
            "final": final,
            "wall_time_s": wall,
            "algorithm": repr(self.algo),
            "algo": self.algo.name,
            "hparams": self.algo.hparams(),
            "data": self.cfg["data"]["name"],
            "model": self.cfg["model"]["name"],
            "num_params": num_params(self.model),
            "num_clients": self.federation.num_clients,
            "tasks": self.federation.task_names,
            "device": str(device),
            "engine": self.engine,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "versions": _versions(),
            "config": checkpoint.run_config(self.cfg),
        })
