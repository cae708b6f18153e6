"""The round loop: sample -> train -> attack -> update -> evaluate -> record.

It never branches on algorithm names: the algorithm, the attack and the engine are built from
the config (``run.setup``) and meet only through the contracts in ``fedmoo.state``. A
``Session`` is one run's life in its directory, split at the engine (``begin``, train,
``update``, ``record``): ``run`` drives one session, fedmoo.run.group the sessions of a sweep
together. Every update and row is checked for divergence (``check_diverged``, ``check_row``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from fedmoo.config import schema
from fedmoo.engine.common import round_seed, seed_torch
from fedmoo.engine.base import Member, as_reported
from fedmoo.errors import DivergenceError, RunInterrupted, UserError
from fedmoo.params import get_flat, set_flat
from fedmoo.report.results import ClientsRoundsWriter, RoundsWriter
from fedmoo.run import identity, loggers
from fedmoo.run.evaluation import RoundEvaluator
from fedmoo.run.progress import open_bar, row_note
from fedmoo.run.rundir import RunDir
from fedmoo.run.sampler import ClientSampler
from fedmoo.run.setup import Parts, build_parts
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
    """Run the job of a resolved config in ``run_dir``. ``record``: the job's Hydra files (name
    -> text), written to ``.hydra/`` once the run is accepted (see run.rundir)."""
    with Session(cfg, run_dir, record) as session:
        done = session.start()
        if done is not None:
            return done
        failures = drive([session], train_each)
        if failures:
            raise failures[session]
        return session.result


def train_each(members: list[Member]) -> list[Any]:
    """Train each run's cohort with its own engine (a run alone)."""
    return [m.engine.train(m.ids, m.w, m.spec, m.seed) for m in members]


def drive(sessions: list[Session], train: Callable[[list[Member]], list[Any]],
          progress: Any = None) -> dict[Session, Exception]:
    """Run the started ``sessions`` round by round, every round's cohorts trained in one
    ``train`` call; a session joins at the round it resumes from and completes as soon as its
    last round is recorded. A session that fails is written up and dropped, the others go on;
    returns the failures. SIGTERM / SIGINT checkpoints every session still training and raises
    RunInterrupted. ``progress``: a bar over the rounds (else each session's own)."""
    failures: dict[Session, Exception] = {}
    live = _finish(list(sessions), failures)
    first = min(s.next_round for s in sessions)
    last = max(s.rounds for s in sessions)
    with StopSignals() as stop:
        for t in range(first, last):
            if stop.signum is not None:
                _interrupt_all(live, stop)
            active = [s for s in live if s.next_round <= t < s.rounds]
            members = [s.guard(failures, s.begin, t) for s in active]
            started = [(s, m) for s, m in zip(active, members) if s not in failures]
            cohorts = train([m for _, m in started]) if started else []
            for (s, _), cohort in zip(started, cohorts):
                s.guard(failures, s.update, t, cohort)
            for s in [s for s, _ in started if s not in failures]:
                s.guard(failures, s.record)
            live = _finish(live, failures)
            if progress is not None:
                if len(sessions) > 1:     # a group: how many of its runs are through
                    over = sum(s in failures or s.next_round >= s.rounds for s in sessions)
                    progress.set_postfix_str(f"{over} of {len(sessions)} runs finished")
                progress.update(1)
    return failures


def _finish(live: list[Session], failures: dict) -> list[Session]:
    """Complete the sessions that have done their rounds; the others that have not failed."""
    for s in live:
        if s not in failures and s.next_round >= s.rounds:
            s.guard(failures, s.complete)
    return [s for s in live if s not in failures and s.result is None]


def _interrupt_all(sessions: list[Session], stop) -> None:
    """Checkpoint every session, then raise one RunInterrupted for them all."""
    said = [s.rundir.interrupted(stop, s.state, s.writer.rows, s.final, s.elapsed())
            for s in sessions]
    if len(sessions) > 1:
        rounds = sorted({int(s.state.round) for s in sessions})
        after = str(rounds[0]) if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
        said = [f"stopped by {stop.name} after round {after}; checkpoints saved for the "
                f"{len(sessions)} runs training together; to continue, run the same command "
                "again (same hydra.sweep.dir)"]
    if said:
        raise RunInterrupted(said[0], stop.signum)


def check_diverged(models: dict[str, torch.Tensor], losses: list, round_done: int,
                   cfg: dict[str, Any], updates: torch.Tensor | None = None) -> None:
    """Raise DivergenceError if a model of ``models`` (``reported_models``; a ``[N, d]`` model
    is one model per client), the clients' ``losses`` (tensors or None) or their ``updates``
    are not finite, or a model's norm (in float64) exceeds ``diverge_norm``."""
    limit = cfg["diverge_norm"]
    norms = {}
    for name, m in models.items():   # a model per client [N, d]: the largest norm
        n = torch.linalg.vector_norm(m, dim=-1, dtype=torch.float64)
        norms[name] = float(n.max()) if n.numel() else 0.0
    bad = [name for name, n in norms.items() if not math.isfinite(n)]
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
    raise _diverged(round_done, what, cfg)


def _diverged(round_done: int, what: str, cfg: dict[str, Any]) -> DivergenceError:
    return DivergenceError(f"training diverged in round {round_done}: {what}; lower client.lr "
                           f"(now {cfg['client']['lr']}) or the server step size, or check the "
                           "algo.* and attack settings")


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
        raise _diverged(round_done, f"{bad[0]} is not finite", cfg)


class Session(contextlib.ExitStack):
    """One run in its directory (a context manager holding the directory's lock, then its
    progress bar and trackers)."""

    def __init__(self, cfg: dict[str, Any], run_dir: str | Path,
                 record: dict[str, str] | None = None, progress: bool | None = None):
        super().__init__()
        self.cfg = cfg = schema.fill(cfg)    # a partial config (Python callers): the defaults
        self.t_start = time.perf_counter()
        self.rundir = RunDir(run_dir, cfg, record)
        self.show_progress = cfg["progress"] if progress is None else progress
        self.parts: Parts | None = None
        self.result: RunResult | None = None   # set when the run completes (its files final)

    def __enter__(self) -> Session:
        self.enter_context(self.rundir)
        return self

    def guard(self, failures: dict, fn, *args):
        """``fn(*args)``; an exception is recorded in ``failures`` under this session."""
        try:
            with self._no_space():
                return fn(*args)
        except Exception as e:  # noqa: BLE001 - the caller reports each session's failure
            failures[self] = e
            return None

    @contextlib.contextmanager
    def _no_space(self):
        """A full disk becomes a UserError saying what to do."""
        try:
            yield
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise UserError(f"no space left on the device of {e.filename or self.rundir.path} "
                            "while writing it; free some space and run the same command again "
                            "(it continues from the last checkpoint)") from None

    def start(self) -> RunResult | None:
        """Check, build and resume the run; its completed result when the directory already
        holds it (nothing left to do), else None."""
        with self._no_space():
            cfg, rundir = self.cfg, self.rundir
            # fedmoo run checked the config before Hydra made the directory; Python's callers
            schema.check(cfg)   # reach the loop directly
            num_clients, per_round = schema.cohort(cfg)
            done = rundir.open(resume=cfg["resume"])
            if done is not None:
                return RunResult(run_dir=rundir.path, status="completed",
                                 final=done.get("final") or {},
                                 wall_time_s=float(done.get("wall_time_s") or 0.0), skipped=True)
            self.seed, self.rounds = int(cfg["seed"]), int(cfg["rounds"])
            parts = self.parts = build_parts(cfg, num_clients, per_round, rundir)
            algo, attack, device = parts.algo, parts.attack, parts.device
            state = algo.init(get_flat(parts.model), num_clients=parts.num_clients)
            self.evaluator = RoundEvaluator(cfg, algo, parts.model, parts.federation,
                                            attack.groups(), state.w)
            state, rows, self.elapsed0 = rundir.resume(state, device)  # (resume=false: none left)
            self.state = state
            self.next_round = rundir.resumed_from
            rundir.accept()   # every check passed: this run owns the directory's record
            rundir.info = parts.describe(cfg)
            self.sampler = ClientSampler(parts.num_clients, parts.per_round, self.seed,
                                         forced=attack.forced_clients, scheme=cfg["sampling"],
                                         sizes=parts.federation.train.sizes.cpu().numpy())
            self.writer = RoundsWriter(rundir.path / "rounds.csv", rows)
            self.clients_log = (ClientsRoundsWriter(rundir.path / "clients_rounds.csv",
                                                    rundir.resumed_from)
                                if cfg["log_clients_every"] else None)
            self.final = rows[-1] if rows else {}
            self.last_eval = (time.perf_counter(), rundir.resumed_from)
            self.bar = self.enter_context(open_bar(
                self.rounds, rundir.resumed_from, f"{algo.name} on {cfg['data']['name']}",
                self.show_progress))
            self.tracker = self.enter_context(contextlib.closing(
                loggers.build(cfg["logger"], rundir.path, identity.run_config(cfg),
                              _overrides(rundir.record), rundir.resumed_from > 0)))
            return None

    def clock(self) -> None:
        """Training starts now: the next row's ``time/round_s`` counts from here."""
        self.last_eval = (time.perf_counter(), self.next_round)

    def elapsed(self) -> float:
        """Compute time of the run, over all its attempts."""
        return self.elapsed0 + time.perf_counter() - self.t_start

    def begin(self, t: int) -> Member:
        """Round ``t`` up to local training: the cohort and what the algorithm asks of it."""
        parts, state = self.parts, self.state
        rs = round_seed(self.seed, t)
        seed_torch(rs, parts.device)
        ids = self.sampler.sample(t)                                                # sample
        spec = parts.attack.client_spec(parts.algo.client_spec(state, ids), ids)
        if not parts.algo.reads_before and not self._due("eval_every", t + 1):
            spec = replace(spec, measure_before=False)   # nobody reads that pass
        # what follows training draws from the RNG state the round had before it, so a run
        # gives the same numbers alone and trained together with others (fedmoo.run.group)
        cuda = torch.cuda.get_rng_state(parts.device) if parts.device.type == "cuda" else None
        self._round = (rs, ids, (torch.get_rng_state(), cuda), spec)
        return Member(parts.engine, ids.to(parts.device), state.w, spec, rs)

    def update(self, t: int, trained) -> None:
        """Round ``t`` after local training: attack and server update (``record`` follows)."""
        rs, ids, rng, spec = self._round
        parts, state, cfg = self.parts, self.state, self.cfg
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state(rng[1], parts.device)
        cohort = parts.attack.apply(as_reported(trained, spec, parts.engine.sgd), rs)  # attack
        try:                                                                         # update
            # the cohort's numbers before a rule reads them, then the models this round made
            reported = [cohort.loss_before, cohort.loss_after, cohort.loss_trained]
            check_diverged({}, reported, t + 1, cfg, cohort.deltas)
            new_state, diag = parts.algo.server_update(state, cohort, self._due("eval_every", t + 1))
            check_diverged(reported_models(parts.algo, new_state), [], t + 1, cfg)
        except DivergenceError as e:
            self.rundir.summary("diverged", state, self.final, self.elapsed(), str(e))
            raise
        w_start, self.state, done = state.w, new_state, t + 1
        self.next_round = done
        self._pending = (done, ids.to(parts.device), trained, cohort, diag, w_start)

    def record(self) -> None:
        """The evaluation and records of the round ``update`` ended."""
        done, dev_ids, trained, cohort, diag, w_start = self._pending
        if self._due("eval_every", done):                                            # evaluate
            row = self.evaluator.row(done, self.state, dev_ids, trained, cohort, diag, w_start)
            now = time.perf_counter()
            row["time/round_s"] = (now - self.last_eval[0]) / (done - self.last_eval[1])
            row["time/elapsed_s"] = self.elapsed()
            try:
                check_row(row, done, self.cfg)
            except DivergenceError as e:
                before = replace(self.state, round=done - 1)   # this round left no row
                self.rundir.summary("diverged", before, self.final, self.elapsed(), str(e))
                raise
            self.last_eval = (now, done)
            self.writer.log(row)                                                     # record
            self.tracker.log(row)
            self.final = row
            self.bar.set_postfix_str(row_note(row))
        if self.clients_log is not None and self._due("log_clients_every", done):
            self.evaluator.log_clients(self.clients_log, done, self.state)
        every = self.cfg["checkpoint_every"]
        if every and done % every == 0 and done < self.rounds:
            self.rundir.save_checkpoint(self.state, self.writer.rows, self.elapsed())
        self.bar.update(1)

    def _due(self, key: str, done: int) -> bool:
        """Whether round ``done`` evaluates (``eval_every``) or logs per-client rows
        (``log_clients_every``); the last round always does."""
        return done % self.cfg[key] == 0 or done == self.rounds

    def complete(self) -> RunResult:
        """The run's files final (``guard`` calls it)."""
        final = {**self.final, **self.evaluator.summary(self.writer.rows)}
        wall = self.elapsed()
        self.tracker.check()    # a tracker that could not start fails the run (not timed)
        clients = self.evaluator.clients_rows(self.state, self.next_round)
        set_flat(self.parts.model, self.state.w)   # model.pt holds the global model
        self.rundir.complete(self.state, final, wall, clients, self.parts.model)
        self.tracker.finish(final, self.rundir.path)
        self.result = RunResult(run_dir=self.rundir.path, status="completed", final=final,
                                rows=self.writer.rows, wall_time_s=wall,
                                resumed_from=self.rundir.resumed_from)
        return self.result


def _overrides(record: dict[str, str]) -> list[str] | None:
    """The job's overrides from its Hydra record (None outside Hydra)."""
    import yaml

    text = record.get("overrides.yaml")
    listed = yaml.safe_load(text) if text else None
    return [str(o) for o in listed] if isinstance(listed, list) else None
