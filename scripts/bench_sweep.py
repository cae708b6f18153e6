#!/usr/bin/env python
"""Sweep benchmark: a paper's grid trained together (hydra/launcher=lockstep) vs one job at a time.

    python scripts/bench_sweep.py                                  # synthetic grid, 1/4/16/64 runs
    python scripts/bench_sweep.py --experiment fedfv/table3 --rounds 20
    python scripts/bench_sweep.py --experiment fedmgda_plus/adult_bias --rounds 2 --data-dir DIR

For each number of runs n, the first n jobs of the experiment's sweep grid (its rows x seeds, in
Hydra's order; more seeds are added when n is larger than the grid) with ``--rounds`` rounds run
twice in this process, in fresh directories: one after the other with ``fedmoo.run.loop.run``
(as the basic launcher runs them, minus the start-up of a process per job), then together with
``fedmoo.run.group.run_jobs`` (as ``hydra/launcher=lockstep`` runs them). It prints the wall time
of both, the ratio, the time per run and round, and the largest difference between the two
rounds.csv files of any job (time columns aside): 0, each job bit for bit as alone.
Trained together, the time is also split into phases: set-up (every job's session started and
the sweep grouped), each round's training call (``train_many``), the runs' evaluations (each
evaluated round, all runs), the checkpoints (none unless ``--set checkpoint_every=N``), the
runs' server steps (attack, server rule, divergence checks) and the rest (records, final
files); on CUDA each phase ends with a synchronisation. ``--set KEY=VALUE`` adds an override
to every job (``--set tf32=true``). ``--busy N`` starts N busy neighbours (processes that spin
on a CPU) for the whole measurement, as on a shared machine; the machine's load average is
printed before and after.
The default experiment, ``bench/synthetic``, needs no files: q-FFL's Synthetic(1,1) with 30
clients (10 a round, batch 10, logistic regression) and a grid of q-FedAvg, FedProx and FedAvg
rows at two learning rates.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # as `fedmoo` sets it (fedmoo.cli.main)

import pandas as pd  # noqa: E402 - after OpenMP's wait policy
import torch  # noqa: E402
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedmoo.cli.config import compose  # noqa: E402
from fedmoo.cli.groups import CONF_DIR  # noqa: E402
from fedmoo.engine.batched import BatchedEngine  # noqa: E402
from fedmoo.run import group, loop, rundir  # noqa: E402
from fedmoo.run.evaluation import RoundEvaluator  # noqa: E402

SYNTHETIC = ["data=synthetic", "num_clients=30", "clients_per_round=10", "eval_every=5"]
SYNTHETIC_GRID = {"algo": ["qfedavg", "fedprox", "fedavg"], "client.lr": ["0.01", "0.02"]}


def grid(experiment: str) -> list[list[str]]:
    """The sweep's jobs as override lists, in Hydra's order (first key slowest)."""
    if experiment == "bench/synthetic":
        params = SYNTHETIC_GRID
        base = SYNTHETIC
    else:
        conf = yaml.safe_load((CONF_DIR / "experiment" / f"{experiment}.yaml").read_text())
        raw = conf["hydra"]["sweeper"]["params"]
        params = {k: str(v).split(",") for k, v in raw.items()}
        base = [f"experiment={experiment}"]
    params = {k: v for k, v in params.items() if k != "seed"}
    seeds = [str(s) for s in range(1000)]
    keys = list(params)
    combos = list(itertools.product(*(params[k] for k in keys)))
    jobs = []
    for seed in seeds:
        for combo in combos:
            jobs.append(base + [f"{k}={v}" for k, v in zip(keys, combo)] + [f"seed={seed}"])
    return jobs


def rounds_diff(a: Path, b: Path) -> float:
    ra, rb = pd.read_csv(a / "rounds.csv"), pd.read_csv(b / "rounds.csv")
    cols = [c for c in ra.columns if not c.startswith("time/")]
    return float((ra[cols] - rb[cols]).abs().max().max())


def measure(cfgs: list[dict], root: Path, alone: bool = True) -> dict:
    alone_dir, together_dir = root / "alone", root / "together"
    alone_s = float("nan")
    if alone:
        t = time.perf_counter()
        for i, cfg in enumerate(cfgs):
            loop.run(cfg, alone_dir / str(i))
        alone_s = time.perf_counter() - t
    plans = []
    with phases() as ph:
        outcomes = group.run_jobs([group.Job(c, together_dir / str(i)) for i, c in enumerate(cfgs)],
                                  on_plan=lambda plan: (plans.append(plan), ph.mark("setup_s")))
    together = ph.total
    bad = [o for o in outcomes if not isinstance(o, loop.RunResult)]
    if bad:
        raise SystemExit(f"a job failed when trained together: {bad[0]}")
    diff = max((rounds_diff(alone_dir / str(i), together_dir / str(i)) for i in range(len(cfgs))
                if alone), default=float("nan"))
    return {"alone_s": alone_s, "together_s": together, "grouped": plans[0].grouped,
            "max_diff": diff, **ph.summary()}


class Phases:
    """Wall time of a grouped sweep's phases (see the module's docstring)."""

    def __init__(self):
        self.start = time.perf_counter()
        self.total = float("nan")
        self.marks: dict[str, float] = {}
        self.rounds: list[float] = []
        self.evals: dict[int, float] = {}   # evaluated round -> seconds of its runs' rows
        self.checkpoints: list[float] = []
        self.servers: list[float] = []
        self.with_before: list[bool] = []   # per training call: every row measured loss_before

    def mark(self, name: str) -> None:
        sync()
        self.marks[name] = time.perf_counter() - self.start

    def timed(self, fn, into: list[float], counts=lambda out: True):
        """``fn`` timed into ``into`` where ``counts(result)`` (else its time is the rest's)."""
        def wrapper(*args, **kwargs):
            sync()
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            sync()
            if counts(out):
                into.append(time.perf_counter() - t)
            return out
        return wrapper

    def summary(self) -> dict:
        setup = self.marks.get("setup_s", float("nan"))
        spent = (setup + sum(self.rounds) + sum(self.evals.values()) + sum(self.checkpoints)
                 + sum(self.servers))
        return {"setup_s": setup, "round_s": self.rounds, "round_with_before": self.with_before,
                "eval_s": sum(self.evals.values()),
                "evals": len(self.evals), "checkpoint_s": sum(self.checkpoints),
                "checkpoints": len(self.checkpoints), "server_s": sum(self.servers),
                "other_s": self.total - spent}


def sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextlib.contextmanager
def phases():
    """Times the training calls, evaluations, checkpoints and server steps of the sweep run
    inside."""
    ph = Phases()
    train_many, row = BatchedEngine.train_many, RoundEvaluator.row
    save, update = rundir.RunDir.save_checkpoint, loop.Session.update
    timed_train = ph.timed(train_many, ph.rounds)

    def train(self, members, **kwargs):
        ph.with_before.append(all(m.spec.measure_before for m in members))
        return timed_train(self, members, **kwargs)

    def timed_row(self, done, *args, **kwargs):
        sync()
        t = time.perf_counter()
        out = row(self, done, *args, **kwargs)
        sync()
        ph.evals[done] = ph.evals.get(done, 0.0) + time.perf_counter() - t
        return out

    BatchedEngine.train_many, RoundEvaluator.row = train, timed_row
    rundir.RunDir.save_checkpoint = ph.timed(save, ph.checkpoints)
    loop.Session.update = ph.timed(update, ph.servers)
    try:
        yield ph
    finally:
        BatchedEngine.train_many, RoundEvaluator.row = train_many, row
        rundir.RunDir.save_checkpoint, loop.Session.update = save, update
        sync()
        ph.total = time.perf_counter() - ph.start


def calls(r: dict) -> str:
    """The training calls' seconds, each marked * where some runs skipped the loss_before pass;
    past 6 calls, the first one and the median of each kind after it."""
    marked = [(t, "" if b else "*") for t, b in zip(r["round_s"], r["round_with_before"])]
    if len(marked) <= 6:
        return ", ".join(f"{t:.2f}{m}" for t, m in marked) + " s (*: some runs skipped the pass)"
    kinds = {m: statistics.median(t for t, k in marked[1:] if k == m)
             for m in ("", "*") if any(k == m for _, k in marked[1:])}
    return (f"first {marked[0][0]:.2f} s, then median " + ", ".join(
        f"{t:.2f} s {'with' if m == '' else 'without'} every run's loss_before pass"
        for m, t in kinds.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="bench/synthetic",
                    help="an experiment with a sweep grid (fedfv/table3, fedmgda_plus/adult_bias)"
                         " or bench/synthetic (default, no files needed)")
    ap.add_argument("--runs", default="1,4,16,64", help="numbers of runs to time")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--data-dir", default=None, help="data_dir of the runs (default: as fedmoo run)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--together-only", action="store_true",
                    help="time the grouped runs only (a grid too long to also run one by one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every job (repeatable), e.g. --set tf32=true")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N busy neighbour processes spinning on a CPU while it measures")
    args = ap.parse_args(argv)
    with neighbours(args.busy):
        return bench(args)


@contextlib.contextmanager
def neighbours(n: int):
    """``n`` processes that spin on a CPU until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def bench(args) -> int:
    counts = [int(n) for n in args.runs.split(",")]
    extra = [f"rounds={args.rounds}", "progress=false", f"device={args.device}",
             "checkpoint_every=0"] + ([f"data_dir={args.data_dir}"] if args.data_dir else [])
    extra += args.set
    jobs = grid(args.experiment)
    print(f"{args.experiment}: {args.rounds} rounds a run; {platform.processor() or platform.machine()}"
          f", {torch.get_num_threads()} threads, torch {torch.__version__}"
          + (f"; {' '.join(args.set)}" if args.set else "")
          + f"; {os.cpu_count()} CPUs, load average {loadavg()}"
          + (f", {args.busy} busy neighbour(s)" if args.busy else ""))
    out = []
    print(f"{'runs':>5} {'alone s':>9} {'together s':>11} {'ratio':>6} {'ms/run-round':>13} "
          f"{'grouped':>8} {'max diff':>9}")
    for n in counts:
        cfgs = [compose(job + extra) for job in jobs[:n]]
        root = Path(tempfile.mkdtemp(prefix="fedmoo-bench-sweep-"))
        try:
            r = measure(cfgs, root, alone=not args.together_only)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        r["runs"] = n
        r["ratio"] = r["alone_s"] / r["together_s"]
        out.append(r)
        print(f"{n:>5} {r['alone_s']:>9.1f} {r['together_s']:>11.1f} {r['ratio']:>6.2f} "
              f"{1000 * r['together_s'] / (n * args.rounds):>13.1f} {r['grouped']:>8} "
              f"{r['max_diff']:>9.1e}", flush=True)
        print(f"      together: set-up {r['setup_s']:.1f} s; training calls {calls(r)}; "
              f"{r['evals']} evaluated rounds {r['eval_s']:.1f} s; {r['checkpoints']} "
              f"checkpoints {r['checkpoint_s']:.1f} s; server steps {r['server_s']:.1f} s; "
              f"the rest {r['other_s']:.1f} s", flush=True)
    print(f"load average at the end: {loadavg()}")
    if args.json:
        print(json.dumps({"experiment": args.experiment, "rounds": args.rounds, "set": args.set,
                          "results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
