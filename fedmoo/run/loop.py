"""The round loop: sample -> train -> attack -> update -> evaluate -> record.

It never branches on algorithm names: the algorithm, the attack and the engine are built from
the config (``run.setup``) and meet only through the contracts in ``fedmoo.state``.
Reliability (docs/troubleshooting.md): a run checkpoints every ``checkpoint_every`` rounds and
on SIGTERM/SIGINT, continues from ``checkpoint.pt`` when started again in the same run
directory, skips a run directory that already holds this run's finished result, and stops with
``status: diverged`` when the model stops being finite or its norm explodes.
"""

from __future__ import annotations

import contextlib
import errno
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedmoo.engine.common import round_seed
from fedmoo.errors import DivergenceError, UserError
from fedmoo.params import get_flat, set_flat
from fedmoo.report.results import ClientsRoundsWriter, RoundsWriter
from fedmoo.run import checkpoint, loggers
from fedmoo.run.evaluation import RoundEvaluator
from fedmoo.run.guards import check_config, check_diverged
from fedmoo.run.rundir import RunDir
from fedmoo.run.sampler import ClientSampler
from fedmoo.run.setup import build_parts
from fedmoo.run.signals import StopSignals


@dataclass
class RunResult:
    run_dir: Path
    status: str
    final: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0
    resumed_from: int = 0   # round the run continued from (0: fresh start)
    skipped: bool = False   # the run directory already held this run's completed result


def run(cfg: dict[str, Any], run_dir: str | Path, record: dict[str, str] | None = None) -> RunResult:
    """Run one federated training job described by a resolved config mapping in ``run_dir``,
    holding the directory's lock for the whole run. ``record``: the job's Hydra files (name ->
    text), written to ``.hydra/`` once the run is accepted (see run.rundir)."""
    t_start = time.perf_counter()
    with RunDir(run_dir, cfg, record) as rundir:
        try:
            return _run(cfg, rundir, t_start)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise UserError(f"no space left on the device of {e.filename or rundir.path} while "
                            "writing it; free some space and run the same command again (it "
                            "continues from the last checkpoint)") from None


def _run(cfg: dict[str, Any], rundir: RunDir, t_start: float) -> RunResult:
    num_clients, per_round = check_config(cfg)
    done = rundir.open(resume=bool(cfg.get("resume", False)))
    if done is not None:
        return RunResult(run_dir=rundir.path, status="completed", final=done.get("final") or {},
                         wall_time_s=float(done.get("wall_time_s") or 0.0), skipped=True)
    seed, rounds = int(cfg["seed"]), int(cfg["rounds"])
    parts = build_parts(cfg, num_clients, per_round, rundir)
    algo, attack, engine, device = parts.algo, parts.attack, parts.engine, parts.device
    num_clients, per_round = parts.num_clients, parts.per_round   # null: the data's own count
    state = algo.init(get_flat(parts.model), num_clients=num_clients)
    evaluator = RoundEvaluator(cfg, algo, parts.model, parts.federation, attack.groups(), state.w)
    state, rows, elapsed0 = rundir.resume(state, device) if cfg.get("resume") else (state, [], 0.)
    resumed_from = rundir.resumed_from
    rundir.accept()   # every check passed: from here on this run owns the directory's record
    rundir.info = parts.describe(cfg)
    sampler = ClientSampler(num_clients, per_round, seed, forced=attack.forced_clients,
                            scheme=cfg.get("sampling", "uniform"),
                            sizes=parts.federation.train.sizes.cpu().numpy())
    writer = RoundsWriter(rundir.file("rounds.csv"), rows)
    every = _Every(cfg, rounds)
    clients_log = (ClientsRoundsWriter(rundir.file("clients_rounds.csv"), resumed_from)
                   if every.log_clients else None)
    final = rows[-1] if rows else {}
    last_eval = (time.perf_counter(), resumed_from)
    bar = _progress(rounds, resumed_from, f"{algo.name} on {cfg['data']['name']}",
                    cfg.get("progress", True))

    def elapsed() -> float:  # compute time of the run, over all its attempts
        return elapsed0 + time.perf_counter() - t_start

    tracker = loggers.build(cfg.get("logger"), rundir.path, checkpoint.run_config(cfg))
    with StopSignals() as stop, bar, contextlib.closing(tracker):
        for t in range(resumed_from, rounds):
            if stop.signum is not None:
                rundir.interrupted(stop, state, writer.rows, final, elapsed())
            rs = round_seed(seed, t)
            torch.manual_seed(rs)
            ids = sampler.sample(t)                                                  # sample
            spec = attack.client_spec(algo.client_spec(state, ids), ids)
            trained = engine.train(ids.to(device), state.w, spec, rs)                # train
            cohort = attack.apply(trained, rs)                                       # attack
            try:                                                                     # update
                reported = [cohort.loss_before, cohort.loss_trained]
                check_diverged(state.w, reported, t + 1, cfg, cohort.deltas)  # before a rule reads them
                new_state, diag = algo.server_update(state, cohort)
                check_diverged(new_state.w, cohort.loss_before, t + 1, cfg)
            except DivergenceError as e:
                rundir.summary("diverged", state, final, elapsed(), str(e))
                raise
            w_start, state, done = state.w, new_state, t + 1
            if every.evaluate(done):                                                 # evaluate
                row = evaluator.row(done, state, ids.to(device), trained, cohort, diag, w_start)
                now = time.perf_counter()
                row["time/round_s"] = (now - last_eval[0]) / (done - last_eval[1])
                row["time/elapsed_s"] = elapsed()
                last_eval = (now, done)
                writer.log(row)                                                      # record
                tracker.log(row)
                final = row
                bar.set_postfix_str(f"acc {row.get('test/acc_mean', float('nan')):.2f} "
                                    f"std {row.get('test/acc_std', float('nan')):.2f}")
            if clients_log is not None and every.clients(done):
                evaluator.log_clients(clients_log, done, state)
            if every.checkpoint(done):
                rundir.save_checkpoint(state, writer.rows, elapsed())
            bar.update(1)
        final = {**final, **evaluator.summary(writer.rows)}
        wall = elapsed()
        clients = evaluator.clients_rows(state)
        set_flat(parts.model, state.w)   # model.pt holds the global model
        rundir.complete(state, final, wall, clients, parts.model)
        tracker.finish(final, rundir.path)
    return RunResult(run_dir=rundir.path, status="completed", final=final, rows=writer.rows,
                     wall_time_s=wall, resumed_from=resumed_from)


class _Every:
    """Which rounds evaluate, log per-client rows and checkpoint (the last always evaluates)."""

    def __init__(self, cfg: dict[str, Any], rounds: int):
        self.rounds = rounds
        self.eval = int(cfg["eval_every"])
        self.log_clients = int(cfg.get("log_clients_every") or 0)
        self.ckpt = int(cfg.get("checkpoint_every") or 0)

    def evaluate(self, done: int) -> bool:
        return done % self.eval == 0 or done == self.rounds

    def clients(self, done: int) -> bool:
        return done % self.log_clients == 0 or done == self.rounds

    def checkpoint(self, done: int) -> bool:
        return bool(self.ckpt) and done % self.ckpt == 0 and done < self.rounds


def _progress(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="round", file=sys.stderr,
                disable=not enabled, dynamic_ncols=True)
