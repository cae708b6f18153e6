"""The trackers' own costs, one at a time (docs/PERFORMANCE.md, "Trackers").

- ``tensorboard``: a row of 40 values as one event (fedmoo's TensorBoardLogger) against one
  ``SummaryWriter.add_scalar`` per value, ms a row;
- ``mlflow``: the writer's ``log_batch`` work for rows of 40 metrics, one row a call against ten
  rows a call, ms a row (fedmoo.run.mlflow_writer.Writer on a new SQLite store);
- ``imports``: what a writer process imports before the run asks for its tracked run
  (``mlflow_writer.warm``, ``wandb_writer.warm``), s.

    python scripts/bench_trackers.py [--parts tensorboard,mlflow,imports] [--rows 100]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROW = {f"m{i}": 0.5 for i in range(40)}


def tensorboard(tmp: Path, rows: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    from fedmoo.run.loggers import TensorBoardLogger

    ours = TensorBoardLogger(tmp / "ours", {}, "bench", {})
    theirs = SummaryWriter(str(tmp / "theirs"))

    def one_event(step: int) -> None:
        ours.log({"round": step, **ROW})

    def per_value(step: int) -> None:
        for k, v in ROW.items():
            theirs.add_scalar(k, v, global_step=step)

    for name, fn in (("one event a row", one_event), ("add_scalar per value", per_value)) * 2:
        t = time.perf_counter()
        for s in range(rows):
            fn(s)
        print(f"tensorboard {name}: {(time.perf_counter() - t) / rows * 1e3:.2f} ms a row",
              flush=True)
    ours.close()
    theirs.close()


def mlflow(tmp: Path, rows: int) -> None:
    from fedmoo.run import mlflow_writer

    mlflow_writer.warm()
    writer = mlflow_writer.Writer({"uri": f"sqlite:///{tmp / 'mlflow.db'}",
                                   "experiment": "bench", "run_name": "bench", "tags": {},
                                   "params": {}})
    step = 0
    for size in (1, 10, 1, 10):
        t = time.perf_counter()
        for _ in range(rows // size):
            writer.metrics([(ROW, step + i) for i in range(size)])
            step += size
        print(f"mlflow {size} row(s) a log_batch: "
              f"{(time.perf_counter() - t) / (rows // size * size) * 1e3:.1f} ms a row", flush=True)
    writer.end(None, [])


def imports(tmp: Path, rows: int) -> None:
    for module in ("mlflow_writer", "wandb_writer"):
        code = (f"import time; t = time.perf_counter(); from fedmoo.run import {module}; "
                f"{module}.warm(); print(time.perf_counter() - t)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        took = done.stdout.strip() or f"failed: {done.stderr.strip().splitlines()[-1:]}"
        print(f"imports of {module}.warm(): {took} s", flush=True)


PARTS = {"tensorboard": tensorboard, "mlflow": mlflow, "imports": imports}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--rows", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for part in args.parts.split(","):
            PARTS[part](Path(tmp), args.rows)


if __name__ == "__main__":
    main()
