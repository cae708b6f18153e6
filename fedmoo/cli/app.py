"""The real ``@hydra.main`` entry point behind ``fedmoo run`` (keeps -m, --cfg and launchers).

Exit statuses of a single run: 0 done (or already done), 2 user error, 3 diverged, 128 + signal
when SIGTERM/SIGINT stopped it after a checkpoint. In a multirun a failing job records its
failure in its summary.json and the sweep goes on (fedmoo.run.callbacks reports the failures).
"""

from __future__ import annotations

import sys
import traceback as tb
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedmoo.run.gpu_lease import lease_device, register_resolvers

register_resolvers()  # ${fedmoo.gpus:} in hydra/launcher/local_gpus.yaml


def _report(result) -> None:
    f = result.final
    rounds = f.get("round", 0)
    if result.skipped:
        print(f"already completed: {rounds} rounds (resume=false runs it again)")
    else:
        since = f" (resumed after round {result.resumed_from})" if result.resumed_from else ""
        print(f"done: {rounds} rounds in {result.wall_time_s:.1f} s{since}")
    tasks = sorted((k for k in f if k.startswith("train/task") and k.endswith("_loss")),
                   key=lambda k: int(k[len("train/task"):-len("_loss")]))
    if tasks:                  # multi-task data: per-task training loss (FMOL)
        print("train loss per task: " + "  ".join(
            f"{k[len('train/'):-len('_loss')]} {f[k]:.4g}" for k in tasks))
    elif "test/acc_mean" in f:
        print(
            "test accuracy (%): mean {:.2f}  std {:.2f}  worst10% {:.2f}  best10% {:.2f}".format(
                f["test/acc_mean"], f["test/acc_std"], f["test/acc_worst10"], f["test/acc_best10"]
            )
        )
    print(f"results: {result.run_dir}")


@hydra.main(config_path="pkg://fedmoo.conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from fedmoo.errors import DivergenceError, RunInterrupted, UserError
    from fedmoo.run.callbacks import note_job_failure
    from fedmoo.run.rundir import RunDirBusy, record_failure, restore_record  # imports torch

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    traceback = bool(cfg.get("traceback", False))
    try:
        try:
            container = OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException as e:
            raise UserError(f"invalid configuration: {str(e).splitlines()[0]}") from None
        from fedmoo.run import loop

        record = {"config.yaml": OmegaConf.to_yaml(cfg),
                  "overrides.yaml": OmegaConf.to_yaml(hc.overrides.task)}
        with lease_device(container.get("device", "auto")) as device:
            result = loop.run({**container, "device": device}, run_dir, record)
    except RunInterrupted as e:
        # Stop the whole sweep too: re-running the command resumes every job.
        print(f"fedmoo: {e}", file=sys.stderr)
        sys.exit(128 + e.signum)
    except (UserError, DivergenceError) as e:
        if traceback:
            raise
        user = isinstance(e, UserError)
        print(f"fedmoo: error: {e}", file=sys.stderr)
        if user:
            restore_record(run_dir)   # Hydra's files of a refused run must not relabel a result
        if user and not isinstance(e, RunDirBusy):  # a diverged run has written its summary
            record_failure(run_dir, str(e), "user")
        if multirun:
            if user:
                note_job_failure(run_dir, str(e))
            return None
        sys.exit(2 if user else 3)
    except Exception as e:  # a bug: record it, keep a sweep going, show the traceback
        trace = tb.format_exc()
        record_failure(run_dir, f"{type(e).__name__}: {e}", "internal", trace)
        if multirun:
            note_job_failure(run_dir, f"{type(e).__name__}: {e}")
        if not multirun or traceback:
            raise
        print(f"fedmoo: error: job failed with {type(e).__name__}: {e} "
              f"(traceback in {run_dir / 'summary.json'})", file=sys.stderr)
        return None
    _report(result)
    return result.final.get("test/acc_mean")
