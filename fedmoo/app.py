"""The real ``@hydra.main`` entry point behind ``fedmoo run`` (keeps -m, --cfg and launchers)."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedmoo.gpu_lease import lease_device, register_resolvers

register_resolvers()  # ${fedmoo.gpus:} in hydra/launcher/local_gpus.yaml


def _report(result) -> None:
    f = result.final
    rounds = f.get("round", 0)
    print(f"done: {rounds} rounds in {result.wall_time_s:.1f} s")
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


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from fedmoo.errors import DivergenceError, UserError
    from fedmoo.results import write_json

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    traceback = bool(cfg.get("traceback", False))
    try:
        try:
            container = OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException as e:
            raise UserError(f"invalid configuration: {str(e).splitlines()[0]}") from None
        from fedmoo.runner import run

        with lease_device(container.get("device", "auto")) as device:
            result = run({**container, "device": device}, run_dir)
    except (UserError, DivergenceError) as e:
        if traceback:
            raise
        status = 2 if isinstance(e, UserError) else 3
        print(f"fedmoo: error: {e}", file=sys.stderr)
        if isinstance(e, UserError):
            write_json(run_dir / "error.json", {"status": "failed", "message": str(e)})
        if multirun:
            return None
        sys.exit(status)
    _report(result)
    return result.final.get("test/acc_mean")
