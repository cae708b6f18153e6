#!/usr/bin/env python
"""One FMGDA round of the paper's MultiFashion configuration, timed by part, in one process:
the plain arithmetic (whole-batch NCHW steps and evaluation, fedmoo before its fast CPU path)
against the fast CPU path (fedmoo.engine.cpu_layout), on the same data, model and seed.

    python scripts/bench_fmol.py                         # 10 clients x 6,000 canvases, K = 10
    python scripts/bench_fmol.py --variants fast         # the fast path alone
    python scripts/bench_fmol.py --threads 2 -- algo.local_steps=2   # `fedmoo run` overrides

Parts: ``train`` (the engine: w_t's per-task losses on every client, then 10 clients x 2 tasks x
K full-batch steps), ``server`` (FMGDA's min-norm step), ``eval`` (the rounds.csv row: test set,
per-task training loss on 60,000 canvases, the stationarity measure's full gradient). Wall and
CPU seconds (this process) of each, and the load average around the run: the numbers of
docs/PERFORMANCE.md, "FMGDA on MultiFashion (paper configuration)". Needs Fashion-MNIST as
``fedmoo run data=multifashion`` finds it. The variants' deltas are compared at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedmoo import engine as fengine  # noqa: E402
from fedmoo.cli.config import compose  # noqa: E402
from fedmoo.engine.base import LocalSGD  # noqa: E402
from fedmoo.engine.common import round_seed  # noqa: E402
from fedmoo.engine.cpu_layout import row_threads  # noqa: E402
from fedmoo.params import get_flat  # noqa: E402
from fedmoo.run.evaluation import RoundEvaluator  # noqa: E402
from fedmoo.run.setup import build_parts, set_threads  # noqa: E402

PAPER = ["data=multifashion", "algo=fmgda"]


class _NoDir:
    """build_parts records the federation in the run directory; the benchmark keeps none."""

    def write_federation(self, attack, federation) -> None:
        pass


@contextmanager
def plain():
    """fedmoo's arithmetic before the fast CPU path: no channels-last copy, whole batches,
    evaluation chunks of ``eval_chunk``."""
    with mock.patch("fedmoo.engine.sequential.fast_layout", lambda model, x: model), \
            mock.patch("fedmoo.engine.sequential.step_chunk", lambda x: None), \
            mock.patch("fedmoo.run.evaluation.fast_layout", lambda model, x: model), \
            mock.patch("fedmoo.run.evaluation.step_chunk", lambda x: None), \
            mock.patch("fedmoo.engine.evaluate.step_chunk", lambda x: None):
        yield


@contextmanager
def fast():
    yield


VARIANTS = {"plain": plain, "fast": fast}


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def one_round(cfg, parts, variant: str) -> tuple[dict[str, tuple[float, float]], torch.Tensor]:
    with VARIANTS[variant]():
        engine = fengine.build(cfg.get("engine", "auto"), parts.model, parts.federation,
                               LocalSGD.from_config(cfg["client"]))
        algo = parts.algo
        state = algo.init(get_flat(parts.model), num_clients=parts.num_clients)
        evaluator = RoundEvaluator(cfg, algo, parts.model, parts.federation, {}, state.w)
        ids = torch.arange(parts.num_clients)
        spec = algo.client_spec(state, ids)
        w0 = state.w
        cohort, *train = timed(lambda: engine.train(ids, w0, spec, round_seed(cfg["seed"], 0)))
        (state, diag), *server = timed(lambda: algo.server_update(state, cohort))
        _, *ev = timed(lambda: evaluator.row(1, state, ids, cohort, cohort, diag, w_start=w0))
    return {"train": tuple(train), "server": tuple(server), "eval": tuple(ev)}, cohort.deltas


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="plain,fast", help="plain and/or fast, in this order")
    ap.add_argument("--threads", default="auto",
                    help="as `fedmoo run threads=` (auto: one intra-op thread, rows side by side "
                         "on torch's default count)")
    ap.add_argument("overrides", nargs="*", help="`fedmoo run` overrides (after --)")
    args = ap.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
    cfg = compose(PAPER + list(args.overrides))
    parts = build_parts(cfg, cfg["num_clients"], cfg["clients_per_round"] or cfg["num_clients"],
                        _NoDir())
    set_threads(args.threads if args.threads == "auto" else int(args.threads),
                sum(p.numel() for p in parts.model.parameters()))
    sizes = parts.federation.train.sizes.tolist()
    print(f"FMGDA, {cfg['data']['name']}: {len(sizes)} clients x {sizes[0]} samples, "
          f"K = {cfg['algo']['local_steps']}, {parts.federation.num_tasks} tasks, "
          f"{torch.get_num_threads()} intra-op thread(s), rows on {row_threads()}, "
          f"load {os.getloadavg()[0]:.2f}")
    deltas = {}
    for name in names:
        parts_s, deltas[name] = one_round(cfg, parts, name)
        total = [sum(v[i] for v in parts_s.values()) for i in (0, 1)]
        cols = "  ".join(f"{k} {w:7.1f} s ({c:6.1f} cpu)" for k, (w, c) in parts_s.items())
        print(f"{name:6s} round {total[0]:7.1f} s ({total[1]:6.1f} cpu)  {cols}  "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    if len(deltas) == 2:
        a, b = deltas.values()
        print(f"relative difference of the deltas: {float((a - b).norm() / b.norm()):.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
