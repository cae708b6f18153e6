#!/usr/bin/env python
"""Round-time benchmark of local training: a peer-style loop vs fedmoo's two engines.

    python scripts/bench.py --quick            # < 1 min on an idle 2-core CPU (small clients, no LSTM)
    python scripts/bench.py --json             # full workloads; last line = one JSON object
    python scripts/bench.py --workloads cnn --clients-per-round 100 --compile on

One process, same synthetic data, same model init, same sampled cohorts and seeds for every
engine; repetitions are interleaved (B0, B1, E, EC, B0, ...) and the first one is a warm-up.
- B0: what peers do: one DataLoader per client over CPU tensors, ``deepcopy`` of the model per
  client, a new optimizer per client, ``.to(device)`` and ``.item()`` every step, state_dict
  averaging in Python.
- B1: ``engine=sequential`` (fedmoo's reference loop).
- E:  ``engine=batched`` eager (the lockstep program where the model traces); EV (``--vmap``):
  ``engine.program=vmap``; EC: the vmap program with ``engine.compile=true``; EG (CUDA):
  ``engine.cuda_graph=true``, the round's steps replayed from one CUDA graph.
A round is local training of K clients (1 epoch, batch 10) plus the FedAvg average; evaluation
is timed apart. Workloads (synthetic tensors of the papers' shapes, 100 clients, 400 samples each):
cnn (FedMGDA+ Table 2 CIFAR CNN), mlp (3072-200-200-10), lstm (Shakespeare: T=80, vocab 80,
embedding 8, 2 x LSTM 256), logreg (Adult-like: 105 features, 2 classes). ``fmnist_logreg``
is real data: Fashion-MNIST (``data=fmnist``, found as ``fedmoo run`` finds it) in a Dirichlet(0.5)
partition over 100 clients, logistic regression (the CPU workload of docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedmoo import algorithms
from fedmoo import engine as fengine
from fedmoo import models
from fedmoo.data.federated import ClientSplit, FederatedData
from fedmoo.engine.base import LocalSGD
from fedmoo.engine.evaluate import evaluate_clients
from fedmoo.params import get_flat, set_flat
from fedmoo.state import ClientSpec

NUM_CLIENTS, BATCH, LR, FULL_ROUNDS = 100, 10, 0.01, 2000
VARIANTS = ("b0", "b1", "e", "ev", "ec", "eg")

# name: model config, input shape, classes, token inputs, samples per client (full, --quick),
# test samples per client (full, --quick)
WORKLOADS = {
    "cnn": ({"name": "cnn_cifar"}, (3, 32, 32), 10, False, (400, 20), (100, 5)),
    "mlp": ({"name": "mlp", "hidden": [200, 200]}, (3, 32, 32), 10, False, (400, 40), (100, 10)),
    "lstm": ({"name": "lstm_shakespeare"}, (80,), 80, True, (400, 10), (100, 1)),
    "logreg": ({"name": "logreg"}, (105,), 2, False, (400, 100), (100, 10)),
    "fmnist_logreg": ({"name": "logreg"}, (1, 28, 28), 10, False, (None, None), (None, None)),
}
# workloads on real data: the overrides of `fedmoo run` that describe their federation
REAL = {"fmnist_logreg": ["data=fmnist", "partition=dirichlet", "partition.beta=0.5",
                          "num_clients=100"]}


def real_data(name: str, device) -> FederatedData:
    from fedmoo import data as fdata
    from fedmoo.cli.config import compose

    cfg = compose(REAL[name])
    return fdata.load_federated(cfg["data"], cfg["partition"], cfg["num_clients"],
                                cfg["data_dir"]).to(device)


def make_data(shape, classes, tokens, n, n_test, device) -> FederatedData:
    g = torch.Generator().manual_seed(0)
    per = n + n_test
    total = NUM_CLIENTS * per
    if tokens:
        x = torch.randint(0, classes, (total, *shape), generator=g).float()
    else:
        x = torch.randn(total, *shape, generator=g)
    y = torch.randint(0, classes, (total,), generator=g)
    train = ClientSplit.from_lists([np.arange(k * per, k * per + n) for k in range(NUM_CLIENTS)])
    test = ClientSplit.from_lists([np.arange(k * per + n, (k + 1) * per) for k in range(NUM_CLIENTS)])
    return FederatedData(x=x, y=y, train=train, test=test, val=None, num_classes=classes,
                         input_shape=shape).to(device)


# -- B0: the peer-style loop --------------------------------------------------------------------
class PeerLoop:
    def __init__(self, model: nn.Module, data: FederatedData):
        self.model = model
        x, y = data.x.cpu(), data.y.cpu()
        self.device = data.x.device
        self.sizes = data.train.sizes.tolist()
        self.loaders = [
            torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[idx], y[idx]),
                                        batch_size=BATCH, shuffle=True)
            for idx in (data.train.of(k).cpu() for k in range(data.num_clients))
        ]

    def round(self, ids: list[int], w: torch.Tensor, seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        set_flat(self.model, w)
        states, ns, running = [], [], 0.0
        for k in ids:
            local = copy.deepcopy(self.model)
            local.train()
            opt = torch.optim.SGD(local.parameters(), lr=LR)
            for xb, yb in self.loaders[k]:
                xb, yb = xb.to(self.device), yb.to(self.device)
                loss = F.cross_entropy(local(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                running += loss.item()
            states.append({key: v.detach().clone() for key, v in local.state_dict().items()})
            ns.append(self.sizes[k])
        total = float(sum(ns))
        avg = {key: sum(s[key] * (n / total) for s, n in zip(states, ns)) for key in states[0]}
        self.model.load_state_dict(avg)
        return get_flat(self.model)


class EngineLoop:
    def __init__(self, engine):
        self.engine = engine

    def round(self, ids: list[int], w: torch.Tensor, seed: int) -> torch.Tensor:
        cohort = self.engine.train(torch.tensor(ids, device=w.device), w, ClientSpec(), seed)
        p = cohort.num_samples / cohort.num_samples.sum()
        return w - p @ cohort.deltas


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps: int) -> float:
    """Median wall time of ``fn()`` over ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def server_times(loops, ids, w0, device, reps: int) -> dict[str, float]:
    """Time of the server step (FedAvg, and FedMGDA+'s Gram + K x K QP) on a cohort of E."""
    loop = next((loops[v] for v in ("e", "eg", "ec", "ev", "b1") if v in loops), None)
    if loop is None:              # B0 alone: no fedmoo engine to make the cohort
        return {}
    cohort = loop.engine.train(torch.tensor(ids, device=device), w0, ClientSpec(), 0)
    out = {}
    for name in ("fedavg", "fedmgda_plus"):
        algo = algorithms.build({"name": name})
        state = algo.init(w0, NUM_CLIENTS)
        out[name] = timed(lambda: algo.server_update(state, cohort), device, reps)
        print(f"   server step {name}: {out[name]:.4f} s", flush=True)
    return out


def flops_per_sample(model: nn.Module, data: FederatedData) -> float:
    """Training FLOPs per sample (forward + backward), counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    xb, yb = data.x[:BATCH], data.y[:BATCH]
    counter = FlopCounterMode(display=False)
    with counter:
        F.cross_entropy(model(xb), yb).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / BATCH


def device_name(device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {cpu}, {torch.get_num_threads()} threads"


def bench_workload(name, args, device, variants) -> dict:
    model_cfg, shape, classes, tokens, (n_full, n_quick), (t_full, t_quick) = WORKLOADS[name]
    n, n_test = (n_quick, t_quick) if args.quick else (n_full, t_full)
    if name in REAL:
        data = real_data(name, device)
        n, n_test = (round(float(data.train.sizes.float().mean())),
                     round(float(data.test.sizes.float().mean())))
        n_full = n
    else:
        n = args.samples or n
        data = make_data(shape, classes, tokens, n, n_test, device)
    torch.manual_seed(0)
    model = models.build(model_cfg, shape, classes).to(device)
    w0 = get_flat(model)
    fps = flops_per_sample(model, data)
    client = LocalSGD(lr=LR, batch_size=BATCH)
    loops = {}
    for v in variants:
        m = copy.deepcopy(model)
        if v == "b0":
            loops[v] = PeerLoop(m, data)
        elif v == "b1":
            loops[v] = EngineLoop(fengine.build("sequential", m, data, client))
        else:
            cfg = {"name": "batched", "compile": v == "ec", "program": "vmap" if v == "ev" else "auto",
                   "cuda_graph": v == "eg"}
            loops[v] = EngineLoop(fengine.build(cfg, m, data, client))
    k = args.clients_per_round
    print(f"\n== {name}: fedmoo.models {model_cfg['name']}; {sum(p.numel() for p in model.parameters()):,} parameters; "
          f"{fps / 1e6:.2f} MFLOP/sample (train, counted)")
    print(f"   {NUM_CLIENTS} clients, K={k}, {n} samples/client, batch {BATCH}, 1 epoch "
          f"({math.ceil(n / BATCH)} steps); {args.reps} timed rounds after 1 warm-up", flush=True)
    rng = np.random.default_rng(0)
    times = {v: [] for v in variants}
    peak = {}
    warmup = {}
    for rep in range(args.reps + 1):
        ids = sorted(rng.choice(NUM_CLIENTS, k, replace=False).tolist())
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        for v in order:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            t = time.perf_counter()
            w = loops[v].round(ids, w0, seed=rep)
            sync(device)
            dt = time.perf_counter() - t
            if rep == 0:
                warmup[v] = dt
            else:
                times[v].append(dt)
            if device.type == "cuda":
                peak[v] = max(peak.get(v, 0), torch.cuda.max_memory_allocated(device))
            assert torch.isfinite(w).all()
            print(f"   {'warm-up' if rep == 0 else f'round {rep}'} {v}: {dt:.4f} s", flush=True)
    eval_s = timed(lambda: evaluate_clients(copy.deepcopy(model), data, "test", w0), device, args.reps)
    print(f"   evaluation: {eval_s:.4f} s", flush=True)
    server = server_times(loops, ids, w0, device, args.reps)

    samples = k * n
    print(f"   {'engine':<6} {'median s':>10} {'min s':>9} {'max s':>9} {'warm-up s':>10} "
          f"{'samples/s':>10} {'TFLOP/s':>8} {'peak MB':>8} {'2000 rounds':>12}")
    med = {v: statistics.median(times[v]) for v in variants}
    scale = n_full / n
    for v in variants:
        mem = f"{peak[v] / 2**20:8.0f}" if v in peak else f"{'n/a':>8}"
        sps = samples / med[v]
        full = med[v] * FULL_ROUNDS * scale
        note = "" if scale == 1 else "*"
        print(f"   {v:<6} {med[v]:10.4f} {min(times[v]):9.4f} {max(times[v]):9.4f} {warmup[v]:10.3f} "
              f"{sps:10.0f} {fps * sps / 1e12:8.4f} {mem} {full:11.0f}s{note}")
    if scale != 1:
        print(f"   * extrapolated: round time x {FULL_ROUNDS} x {scale:g} (400 samples/client)")
    print(f"   evaluation of all {NUM_CLIENTS} clients' test splits ({NUM_CLIENTS * n_test} samples): "
          f"{eval_s:.4f} s")
    e_best = min((med[v] for v in variants if v in ("e", "ec", "ev", "eg")), default=float("nan"))
    for algo_name, s in server.items():
        share = (s + eval_s) / (e_best + s + eval_s)
        print(f"   server step {algo_name} on the [K, d] deltas: {s:.4f} s; server + evaluation "
              f"= {100 * share:.1f}% of a round of E that evaluates every round")
    res = {"b0_round_s": med.get("b0", float("nan")), "b1_round_s": med.get("b1", float("nan")),
           "e_round_s": e_best, "eval_s": eval_s,
           **{f"server_{a}_s": s for a, s in server.items()}}
    res["round_s"] = med
    res["peak_mb"] = {v: peak[v] / 2**20 for v in peak}
    res["e_vs_b0"] = res["b0_round_s"] / e_best
    res["e_vs_b1"] = res["b1_round_s"] / e_best
    for v in variants:
        if v not in ("b0", "b1"):
            lo = {b: min(times[b]) / max(times[v]) for b in ("b0", "b1") if b in times}
            hi = {b: max(times[b]) / min(times[v]) for b in ("b0", "b1") if b in times}
            print("   " + "  ".join(f"{v} vs {b}: {med[b] / med[v]:.2f}x (range {lo[b]:.2f}-{hi[b]:.2f})"
                                    for b in lo))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced client sizes and 2 repetitions")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--workloads", default=None,
                    help="default cnn,mlp,lstm,logreg; --quick: cnn,mlp,logreg (the LSTM's "
                         "380 MFLOP a sample alone took two minutes a round on the busy VM)")
    ap.add_argument("--reps", type=int, default=None, help="timed rounds per engine (default 5, quick 2)")
    ap.add_argument("--clients-per-round", type=int, default=10)
    ap.add_argument("--samples", type=int, default=None,
                    help="training samples per client (default 400; --quick: fewer for cnn and lstm)")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    ap.add_argument("--vmap", action="store_true",
                    help="also time EV: engine=batched with engine.program=vmap")
    ap.add_argument("--variants", default=None,
                    help="the engines to time, e.g. e,eg (default: b0,b1,e, and ev/ec/eg as the "
                         "other options and the device give); one alone shows its own peak memory")
    ap.add_argument("--tf32", action="store_true",
                    help="CUDA: TensorFloat-32 matrix products and convolutions (fedmoo's tf32=true)")
    ap.add_argument("--compile", default="auto", choices=["auto", "on", "off"],
                    help="also time engine.compile=true (auto: on CUDA only)")
    args = ap.parse_args(argv)
    args.reps = args.reps or (2 if args.quick else 5)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32      # as fedmoo's tf32 knob
        torch.backends.cudnn.allow_tf32 = args.tf32
    compiled = args.compile == "on" or (args.compile == "auto" and device.type == "cuda")
    variants = (["b0", "b1", "e"] + (["ev"] if args.vmap else []) + (["ec"] if compiled else [])
                + (["eg"] if device.type == "cuda" else []))
    if args.variants:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        if bad := [v for v in variants if v not in VARIANTS]:
            ap.error(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
        if device.type != "cuda" and "eg" in variants:
            ap.error("variant 'eg' (engine.cuda_graph=true) needs a CUDA device")
    workloads = args.workloads or ("cnn,mlp,logreg" if args.quick else "cnn,mlp,lstm,logreg")
    names = [w.strip() for w in workloads.split(",") if w.strip()]
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload {bad[0]!r}; choose from {', '.join(WORKLOADS)}")

    dev_name = device_name(device)
    print(f"device: {dev_name}; torch {torch.__version__}, python {platform.python_version()}"
          + (f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
             if device.type == "cuda" else "")
          + f"; float32 (TF32 {'on' if args.tf32 and device.type == 'cuda' else 'off'}); "
          + ("--quick" if args.quick else "full"), flush=True)
    t0 = time.perf_counter()
    out = {name: bench_workload(name, args, device, variants) for name in names}
    print(f"\ntotal {time.perf_counter() - t0:.1f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json:
        print(json.dumps({"device": dev_name, "workloads": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
