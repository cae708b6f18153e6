#!/usr/bin/env python
"""Round-time benchmark of local training: a peer-style loop vs fedmoo's two engines.

    python scripts/bench.py --quick            # < 2 min on a 2-core CPU (reduced client sizes)
    python scripts/bench.py --json             # full workloads; last line = one JSON object
    python scripts/bench.py --workloads cnn --clients-per-round 100 --compile on

One process, same synthetic data, same model init, same sampled cohorts and seeds for every
engine; repetitions are interleaved (B0, B1, E, EC, B0, ...) and the first one is a warm-up.
- B0: what peers do: one DataLoader per client over CPU tensors, ``deepcopy`` of the model per
  client, a new optimizer per client, ``.to(device)`` and ``.item()`` every step, state_dict
  averaging in Python.
- B1: ``engine=sequential`` (fedmoo's reference loop).
- E:  ``engine=batched`` eager; EC: the same with ``engine.compile=true``.
A round is local training of K clients (1 epoch, batch 10) plus the FedAvg average; evaluation
is timed apart. Workloads (synthetic tensors of the papers' shapes, 100 clients, 400 samples each):
cnn (FedMGDA+ Table 2 CIFAR CNN), mlp (3072-200-200-10), lstm (Shakespeare: T=80, vocab 80,
embedding 8, 2 x LSTM 256), logreg (Adult-like: 105 features, 2 classes).
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

from fedmoo import engine as fengine
from fedmoo import models
from fedmoo.data.federated import ClientSplit, FederatedData
from fedmoo.engine.evaluate import evaluate_clients
from fedmoo.errors import UserError
from fedmoo.params import get_flat, set_flat
from fedmoo.state import ClientSpec

NUM_CLIENTS, BATCH, LR, FULL_ROUNDS = 100, 10, 0.01, 2000

# name: model config, input shape, classes, token inputs, samples per client (full, --quick),
# test samples per client (full, --quick)
WORKLOADS = {
    "cnn": ({"name": "cnn_cifar"}, (3, 32, 32), 10, False, (400, 20), (100, 5)),
    "mlp": ({"name": "mlp", "hidden": [200, 200]}, (3, 32, 32), 10, False, (400, 400), (100, 10)),
    "lstm": ({"name": "lstm_shakespeare"}, (80,), 80, True, (400, 10), (100, 1)),
    "logreg": ({"name": "logreg"}, (105,), 2, False, (400, 400), (100, 10)),
}


# -- local stand-ins, used only while fedmoo.models lacks the paper networks -------------------
class _CifarCNN(nn.Module):
    """conv5x5 3->64, pool 2, conv5x5 64->64, pool 2, fc 1600-384-192-10 (797,962 parameters)."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(input_shape[0], 64, 5), nn.Conv2d(64, 64, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(1600, 384), nn.Linear(384, 192), nn.Linear(192, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class _ShakespeareLSTM(nn.Module):
    """Embedding 8, 2 stacked hand-written LSTM cells of 256 units, dense on the last step."""

    def __init__(self, input_shape, num_classes, embed=8, hidden=256, layers=2):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(num_classes, embed)
        sizes = [embed] + [hidden] * layers
        self.w_ih = nn.ParameterList(nn.Parameter(torch.randn(4 * hidden, a) / math.sqrt(hidden)) for a in sizes[:-1])
        self.w_hh = nn.ParameterList(nn.Parameter(torch.randn(4 * hidden, hidden) / math.sqrt(hidden)) for _ in sizes[:-1])
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(4 * hidden)) for _ in sizes[:-1])
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x):
        seq = self.embed(x.long())
        for w_ih, w_hh, b in zip(self.w_ih, self.w_hh, self.b):
            h = seq.new_zeros(seq.shape[0], self.hidden)
            c = torch.zeros_like(h)
            outs = []
            for t in range(seq.shape[1]):
                i, f, g, o = (seq[:, t] @ w_ih.T + h @ w_hh.T + b).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            seq = torch.stack(outs, dim=1)
        return self.out(seq[:, -1])


LOCAL = {"cnn_cifar": _CifarCNN, "lstm_shakespeare": _ShakespeareLSTM}


def build_model(cfg, shape, classes) -> tuple[nn.Module, str]:
    try:
        return models.build(cfg, shape, classes), f"fedmoo.models {cfg['name']}"
    except UserError:
        return LOCAL[cfg["name"]](shape, classes), f"local stand-in for {cfg['name']} (not in fedmoo.models yet)"


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
    data = make_data(shape, classes, tokens, n, n_test, device)
    torch.manual_seed(0)
    model, origin = build_model(model_cfg, shape, classes)
    model = model.to(device)
    w0 = get_flat(model)
    fps = flops_per_sample(model, data)
    client = {"lr": LR, "batch_size": BATCH, "epochs": 1, "local_steps": None,
              "momentum": 0.0, "weight_decay": 0.0}
    loops = {}
    for v in variants:
        m = copy.deepcopy(model)
        if v == "b0":
            loops[v] = PeerLoop(m, data)
        elif v == "b1":
            loops[v] = EngineLoop(fengine.build("sequential", m, data, client))
        else:
            loops[v] = EngineLoop(fengine.build({"name": "batched", "compile": v == "ec"}, m, data, client))
    k = args.clients_per_round
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
    sync(device)
    t = time.perf_counter()
    evaluate_clients(copy.deepcopy(model), data, "test", w0)
    sync(device)
    eval_s = time.perf_counter() - t

    samples = k * n
    print(f"\n== {name}: {origin}; {sum(p.numel() for p in model.parameters()):,} parameters; "
          f"{fps / 1e6:.2f} MFLOP/sample (train, counted)")
    print(f"   {NUM_CLIENTS} clients, K={k}, {n} samples/client, batch {BATCH}, 1 epoch "
          f"({math.ceil(n / BATCH)} steps); {args.reps} timed rounds after 1 warm-up")
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
    e_best = min(med[v] for v in variants if v in ("e", "ec"))
    res = {"b0_round_s": med.get("b0", float("nan")), "b1_round_s": med.get("b1", float("nan")),
           "e_round_s": e_best}
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
    ap.add_argument("--quick", action="store_true", help="reduced client sizes and 3 repetitions")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--workloads", default="cnn,mlp,lstm,logreg")
    ap.add_argument("--reps", type=int, default=None, help="timed rounds per engine (default 5, quick 3)")
    ap.add_argument("--clients-per-round", type=int, default=10)
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    ap.add_argument("--compile", default="auto", choices=["auto", "on", "off"],
                    help="also time engine.compile=true (auto: on CUDA only)")
    args = ap.parse_args(argv)
    args.reps = args.reps or (3 if args.quick else 5)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    compiled = args.compile == "on" or (args.compile == "auto" and device.type == "cuda")
    variants = ["b0", "b1", "e"] + (["ec"] if compiled else [])
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload {bad[0]!r}; choose from {', '.join(WORKLOADS)}")

    dev_name = device_name(device)
    print(f"device: {dev_name}; torch {torch.__version__}, python {platform.python_version()}"
          + (f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
             if device.type == "cuda" else "")
          + f"; float32 (TF32 off); {'--quick' if args.quick else 'full'}")
    t0 = time.perf_counter()
    out = {name: bench_workload(name, args, device, variants) for name in names}
    print(f"\ntotal {time.perf_counter() - t0:.1f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json:
        print(json.dumps({"device": dev_name, "workloads": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
