#!/usr/bin/env python
"""The GPU check (issue "The GPU path") in one command: run on a machine with a CUDA GPU, from
the checkout's root, after ``scripts/gpu_check.sh`` has installed the carried wheels.

    python scripts/gpu_check.py OUT                      # every part: tests, runs, bench
    python scripts/gpu_check.py OUT --parts tests,runs   # some of them
    python scripts/gpu_check.py OUT --device cpu --quick # rehearse on a CPU (no CUDA tests)

Parts:
  tests  ``pytest -m cuda tests/cuda`` (engines in float64 and float32 with TF32 off and on,
         resume, every algorithm on CUDA), then the rest of the suite with CUDA present;
  runs   ``fedmoo run setup=fedmgda_plus_fmnist_shards model=cnn_fmnist algo=fedmgda_plus``
         (engine=auto), a sweep,
         a run stopped by SIGTERM and resumed (rows compared with the uninterrupted run), and a
         ``hydra/launcher=lockstep`` sweep, on the carried Fashion-MNIST (``--data-dir``);
  bench  ``scripts/bench.py`` CNN workload (FedMGDA+ Table 2 net) at K = 10, 50 and 100, every
         engine, E and EG alone (their own memory), and with TF32;
  sweep  FedMGDA+ Table 8's grid (104 runs) trained together for 3 rounds on random tensors in
         CIFAR-10's format (``scripts/bench_sweep.py --together-only``), in float32, with TF32,
         and with TF32 and CUDA graphs (``--sweep-variants``).

Writes to OUT (run directories go to --work): summary.json (the machine, versions, every command with its exit status, seconds
and parsed results) and one log per part (pytest_cuda.log, pytest_all.log, runs.log,
bench.log, sweep.log): at most 6 files, so all of them come back from the device tool.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FEDMOO = [sys.executable, "-m", "fedmoo"]


class Check:
    def __init__(self, out: Path, work: Path, device: str, data_dir: Path, quick: bool,
                 deadline: float | None = None, bench_k: tuple[int, ...] = (10, 50, 100),
                 bench_reps: int | None = None, sweep_rounds: int = 3,
                 sweep_variants: tuple[str, ...] = ("fp32",)):
        self.out, self.work, self.device, self.data_dir = out, work, device, data_dir
        self.quick, self.bench_k, self.bench_reps = quick, bench_k, bench_reps
        self.sweep_rounds, self.sweep_variants = sweep_rounds, sweep_variants
        self.end = None if deadline is None else time.perf_counter() + deadline
        shutil.rmtree(work, ignore_errors=True)   # runs of an earlier check would be skipped as done
        self.output = ""     # the last step's own output
        self.summary: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "steps": []}

    def left(self) -> float:
        """Seconds left before ``--deadline`` (infinite without one)."""
        return float("inf") if self.end is None else self.end - time.perf_counter()

    def skip(self, name: str, cmd: list[str], **extra) -> dict:
        rec = {"name": name, "cmd": " ".join(cmd), "rc": "skipped", "seconds": 0, **extra}
        self.summary["steps"].append(rec)
        self.save()
        self.output = ""
        print(f"gpu_check: {name}: skipped (deadline)", flush=True)
        return rec

    def step(self, name: str, cmd: list[str], log: str, timeout: float, **extra) -> dict:
        """Runs ``cmd`` from the checkout's root, appending its output to ``log`` and keeping
        it in ``self.output``; within ``--deadline``, a step that would start with under 20 s
        left is skipped (rc "skipped")."""
        t = time.perf_counter()
        if self.left() < 20:
            return self.skip(name, cmd, **extra)
        timeout = min(timeout, self.left())
        path = self.out / log
        start = path.stat().st_size if path.exists() else 0
        with open(path, "a") as f:
            f.write(f"\n$ {' '.join(cmd)}\n")
            f.flush()
            try:
                rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        with open(path, "rb") as f:
            f.seek(start)
            self.output = f.read().decode(errors="replace")
        rec = {"name": name, "cmd": " ".join(cmd), "rc": rc,
               "seconds": round(time.perf_counter() - t, 1), **extra}
        self.summary["steps"].append(rec)
        self.save()
        print(f"gpu_check: {name}: rc={rc} in {rec['seconds']} s", flush=True)
        return rec

    def save(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str))

    def run_args(self, *more: str) -> list[str]:
        return [f"data_dir={self.data_dir}", f"device={self.device}", "progress=false", *more]


def environment(device: str) -> dict:
    import torch

    env = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cuda_available": torch.cuda.is_available(), "device": device}
    if torch.cuda.is_available():
        env.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                   gpu=torch.cuda.get_device_name(0),
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                   torch_tf32_defaults={"matmul": torch.backends.cuda.matmul.allow_tf32,
                                        "cudnn": torch.backends.cudnn.allow_tf32})
    try:
        env["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                           timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return env


def pytest_counts(text: str) -> str:
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    return lines[-1].strip("= ") if lines else "no summary line"


def tests(c: Check) -> None:
    rec = c.step("pytest -m cuda", [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "cuda",
                                    "tests/cuda", "-s"], "pytest_cuda.log", 1200)
    rec["result"] = pytest_counts(c.output)
    workers = str(min(8, os.cpu_count() or 1))
    rec = c.step("pytest (the rest of the suite, CUDA present)",
                 [sys.executable, "-m", "pytest", "-q", "-rs", "-n", workers, "-p",
                  "no:cacheprovider", "-m", "not cuda"], "pytest_all.log", 1500)
    rec["result"] = pytest_counts(c.output)
    c.save()


def last_json(c: Check, rec: dict):
    """The JSON object a successful step printed as its last line, else None."""
    lines = c.output.strip().splitlines()
    if rec["rc"] != 0 or not lines:
        return None
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return None


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "rounds.csv"
    return list(csv.DictReader(path.open())) if path.exists() else []


def summary_of(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {}


def brief(run_dir: Path) -> dict:
    s, r = summary_of(run_dir), rows(run_dir)
    times = [float(x["time/round_s"]) for x in r if x.get("time/round_s")]
    return {"status": s.get("status"), "engine": s.get("engine"),
            "engine_choice": s.get("engine_choice"), "tf32": s.get("tf32"),
            "rounds": len(r), "median_round_s": sorted(times)[len(times) // 2] if times else None,
            "final": {k: v for k, v in (s.get("final") or {}).items()
                      if k in ("test/acc_mean", "test/acc_std", "train/loss_mean")}}


def runs(c: Check) -> None:
    n = 5 if c.quick else 20
    real = c.work / "real"
    rec = c.step("run fmnist cnn_fmnist fedmgda_plus",
                 FEDMOO + ["run", "setup=fedmgda_plus_fmnist_shards", "model=cnn_fmnist", "algo=fedmgda_plus",
                           f"rounds={n}", f"hydra.run.dir={real}", *c.run_args()],
                 "runs.log", 900)
    rec["run"] = brief(real)
    sweep = c.work / "sweep"
    rec = c.step("sweep algo x seed", FEDMOO + [
        "run", "-m", "setup=fedmgda_plus_fmnist_shards", "model=cnn_fmnist", "algo=fedavg,fedmgda_plus", "seed=0,1",
        "rounds=3", f"hydra.sweep.dir={sweep}", *c.run_args()], "runs.log", 900)
    rec["jobs"] = jobs(sweep)
    resume_check(c, 4 if c.quick else 12)
    lock = c.work / "lockstep"
    rec = c.step("lockstep sweep", FEDMOO + [
        "run", "-m", "hydra/launcher=lockstep", "setup=fedmgda_plus_fmnist_shards", "model=logreg",
        "algo=fedavg,qfedavg", "seed=0,1,2", "rounds=5", f"hydra.sweep.dir={lock}",
        *c.run_args()], "runs.log", 900)
    rec["jobs"] = jobs(lock)
    rec["launcher_says"] = [ln.strip() for ln in c.output.splitlines()
                            if "train together" in ln or "in lockstep" in ln]
    c.save()


def jobs(sweep_dir: Path) -> dict:
    """``brief`` of each finished job of a sweep directory."""
    return {p.name: brief(p) for p in sorted(sweep_dir.glob("*")) if (p / "summary.json").exists()}


def resume_check(c: Check, rounds: int) -> None:
    """A run stopped by SIGTERM after a few rounds and started again, against the same run
    uninterrupted, both with deterministic=true: the resumed run must end completed with every
    round and the same rows (the largest difference is recorded; 0 expected)."""
    args = ["run", "setup=fedmgda_plus_fmnist_shards", "model=cnn_fmnist", "algo=fedmgda_plus", f"rounds={rounds}",
            "checkpoint_every=1", "deterministic=true"]
    full, cut = c.work / "full", c.work / "cut"
    c.step("uninterrupted run", FEDMOO + args + [f"hydra.run.dir={full}", *c.run_args()],
           "runs.log", 900)
    cmd = FEDMOO + args + [f"hydra.run.dir={cut}", *c.run_args()]
    if c.left() < 60:
        c.skip("stopped run", cmd)
        return
    t, limit = time.perf_counter(), min(600.0, c.left() - 30)
    with open(c.out / "runs.log", "a") as log:
        log.write(f"\n$ {' '.join(cmd)} ... (SIGTERM after 3 rows)\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None and len(rows(cut)) < 3 and time.perf_counter() - t < limit:
            time.sleep(0.2)
        stopped_at = len(rows(cut))
        proc.send_signal(signal.SIGTERM)
        try:
            rc_stop = proc.wait(timeout=max(10.0, min(300.0, c.left() - 20)))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc_stop = f"killed: no exit within the deadline ({proc.wait()})"
    rec = c.step("resumed run", FEDMOO + args + [f"hydra.run.dir={cut}", *c.run_args()],
                 "runs.log", 900)
    a, b = rows(full), rows(cut)
    diff = {}
    for key in ("test/acc_mean", "train/loss_mean"):
        pairs = [(float(x[key]), float(y[key])) for x, y in zip(a, b) if x.get(key) and y.get(key)]
        diff[key] = max((abs(x - y) for x, y in pairs), default=None)
    rec.update(stopped_after_rows=stopped_at, sigterm_rc=rc_stop,
               status=summary_of(cut).get("status"), resumed_from=summary_of(cut).get("resumed_from"),
               rows=[len(a), len(b)], largest_row_difference=diff)
    c.save()


def bench(c: Check) -> None:
    """The first K (the targets' K=10) with every engine; E and EG each alone at the largest K
    (their own peak memory: in a run of every engine, B0's and B1's data stay resident beside
    them); E and EG with TF32 at the first K; then the other Ks with every engine."""
    ks = list(c.bench_k)
    steps = [(ks[0], [])] + [(max(ks), ["--variants", v]) for v in ("e", "eg")]
    steps += [(ks[0], ["--variants", "e,eg", "--tf32"])] + [(k, []) for k in ks[1:]]
    for k, extra in steps:
        reps = ["--reps", str(c.bench_reps)] if c.bench_reps else []
        rec = c.step(f"bench cnn K={k} {' '.join(extra)}".strip(),
                     [sys.executable, "scripts/bench.py", "--workloads", "cnn",
                      "--clients-per-round", str(k), "--device", c.device, "--json", *reps,
                      *extra] + (["--quick"] if c.quick else []), "bench.log", 1500)
        rec["result"] = last_json(c, rec)
        c.save()
        if c.quick:
            break


def write_cifar10_like(root: Path, seed: int = 0) -> Path:
    """CIFAR-10's on-disk format (cifar-10-batches-py: five pickled training batches of 10,000
    rows and a test batch) holding random images, for a grid of CIFAR-10's shapes where the
    real set is not at hand."""
    import pickle

    import numpy as np

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        batch = {"batch_label": name, "labels": rng.integers(0, 10, 10_000).tolist(),
                 "data": rng.integers(0, 256, (10_000, 3072), dtype=np.uint8),
                 "filenames": [f"{name}_{j}.png" for j in range(10_000)]}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"], "num_cases_per_batch": 10_000,
            "num_vis": 3072}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return folder


SWEEP_VARIANTS = {"fp32": [], "tf32": ["tf32=true"],   # and each with checkpoint_every=1
                  "tf32_graph": ["tf32=true", "engine={name:batched,cuda_graph:true}"]}


def sweep(c: Check) -> None:
    """FedMGDA+ Table 8's grid (26 rows x 4 seeds = 104 runs, K=10: 1,040 client rows a round)
    trained together (fedmoo.run.group, as hydra/launcher=lockstep) for a few rounds on random
    tensors in CIFAR-10's format and shapes, once per ``--sweep-variants`` (SWEEP_VARIANTS: the
    overrides of each). bench_sweep splits the time into set-up, each round's training call,
    the group evaluations and the rest; the grid's 2000 rounds are estimated from the training
    calls after the first (its cuDNN / allocator warm-up; rounds with a row, which measure every
    run's loss_before, and rounds without apart), 200 evaluations and 199 rounds of
    checkpoints at the measured cost of one (each run checkpoints after every round but the
    last here), and the set-up and the rest once."""
    data = c.work / "cifar-like"
    write_cifar10_like(data)
    runs, rounds = (8, 2) if c.quick else (104, c.sweep_rounds)
    for variant in c.sweep_variants:
        sets = [a for o in SWEEP_VARIANTS[variant] + ["checkpoint_every=1"] for a in ("--set", o)]
        rec = c.step(f"table8 grid together {variant}", [
            sys.executable, "scripts/bench_sweep.py", "--experiment", "fedmgda_plus/table8",
            "--runs", str(runs), "--rounds", str(rounds), "--together-only", "--device", c.device,
            "--data-dir", str(data), "--json", *sets], "sweep.log", 1500)
        out = last_json(c, rec)
        rec["result"] = res = None if out is None else out["results"][0]
        if res is not None:
            rec["grid_2000_rounds_s"] = grid_estimate(res)
        c.save()


def grid_estimate(res: dict, rounds: int = 2000, evals: int = 200,
                  saves: int = 199) -> float | None:
    """The whole grid's seconds from one short grouped run's phases (see ``sweep``), the rest
    (which holds the final files) counted once: Table 8 evaluates every 10 rounds (the last included) and checkpoints every 10 (default
    checkpoint_every; none after the last round). The runs' checkpoints of one round cost
    ``checkpoint_s`` / (runs' saves) x runs."""
    calls = list(zip(res["round_s"], res["round_with_before"]))
    calls = calls[1:] or calls
    if not calls:                    # no group trained (e.g. a rehearsal on a CPU)
        return None
    # rounds with a row measure every run's loss_before; the others only for the rules that read it
    kinds = [[t for t, b in calls if b], [t for t, b in calls if not b]]
    full, light = (sum(k) / len(k) if k else None for k in kinds)
    full, light = full if full is not None else light, light if light is not None else full
    per_eval = res["eval_s"] / res["evals"] if res["evals"] else 0.0
    per_save_round = res["checkpoint_s"] / res["checkpoints"] * res["runs"] if res["checkpoints"] else 0.0
    server = res["server_s"] / len(res["round_s"])
    return (res["setup_s"] + res["other_s"] + evals * full + (rounds - evals) * light
            + rounds * server + evals * per_eval + saves * per_save_round)


PARTS = {"tests": tests, "runs": runs, "bench": bench, "sweep": sweep}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--parts", default="tests,runs,bench")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--data-dir", type=Path, default=ROOT / ".gpu" / "data")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "fedmoo-gpu-check",
                    help="the runs' directories (kept out of OUT: the device tool returns few "
                         "files)")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and one bench size")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds for all steps: each step's timeout is cut to what is left")
    ap.add_argument("--bench-k", default="10,50,100", help="bench's clients per round, in order")
    ap.add_argument("--bench-reps", type=int, default=None, help="bench's timed rounds (default 5)")
    ap.add_argument("--sweep-rounds", type=int, default=3, help="rounds of the Table 8 grid")
    ap.add_argument("--sweep-variants", default="fp32",
                    help=f"the grid's settings, in order: {', '.join(SWEEP_VARIANTS)}")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    if unknown := [p for p in parts if p not in PARTS]:
        ap.error(f"unknown part {unknown[0]!r}; choose from {', '.join(PARTS)}")
    variants = tuple(args.sweep_variants.split(","))
    if unknown := [v for v in variants if v not in SWEEP_VARIANTS]:
        ap.error(f"unknown sweep variant {unknown[0]!r}; choose from {', '.join(SWEEP_VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    c = Check(args.out.resolve(), args.work.resolve(), args.device, args.data_dir.resolve(),
              args.quick, args.deadline, tuple(int(k) for k in args.bench_k.split(",")),
              args.bench_reps, args.sweep_rounds, variants)
    c.summary["environment"] = environment(args.device)
    c.save()
    for p in parts:
        PARTS[p](c)
    c.summary["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    c.save()
    failed = [s["name"] for s in c.summary["steps"] if s["rc"] not in (0, "skipped")]
    print(f"gpu_check: {len(c.summary['steps'])} steps, failed: {failed or 'none'}; "
          f"{c.out / 'summary.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
