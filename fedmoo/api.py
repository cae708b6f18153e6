"""fedmoo from Python: ``run`` a job as ``fedmoo run`` would, ``load`` results as a DataFrame.

```python
import fedmoo.api as fm

result = fm.run(["algo=fedfv", "rounds=20"], run_dir="outputs/fedfv")   # a RunResult
frame = fm.load("outputs/fedfv", "outputs/fedavg")                      # one row per job x round
```

``run`` takes and checks the command line's overrides (a mistake is a ``UserError`` with the
CLI's one-line message) and writes the same files, so the reports treat a run made from Python
like any other. Runs in one process train one after another; ``fedmoo run -m`` runs sweeps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fedmoo.config import schema
from fedmoo.config.knobs import integer
from fedmoo.cli.config import compose
from fedmoo.errors import UserError

__all__ = ["compose", "load", "run"]


def run(overrides: list[str] | tuple[str, ...] = (), run_dir: str | Path | None = None):
    """Train one job; returns ``fedmoo.run.loop.RunResult`` (``status``, ``final`` metrics,
    ``rows``, ``run_dir``). ``run_dir`` defaults to ``outputs/runs/<date>/<time>_<algo>_<data>``
    like the CLI's. A directory that already holds this run's result is not trained again
    (``resume=false`` in the overrides starts over), as with the CLI."""
    from omegaconf import OmegaConf

    from fedmoo.cli.overrides import check_new_keys, check_overrides
    from fedmoo.run import loop
    from fedmoo.run.gpu_lease import lease_device

    overrides = [str(o) for o in overrides]
    err = check_overrides(overrides) or check_new_keys(overrides)
    if err:
        raise UserError(err)
    if any(o.lstrip("+~").startswith(("hydra.", "hydra/")) for o in overrides):
        raise UserError("hydra.* overrides have no effect from Python; pass run_dir= instead")
    cfg = compose(overrides)
    schema.check(cfg)            # before any directory exists, as `fedmoo run`
    if run_dir is None:
        run_dir = (Path("outputs/runs") / time.strftime("%Y-%m-%d")
                   / f"{time.strftime('%H-%M-%S')}_{cfg['algo']['name']}_{cfg['data']['name']}")
    record = {"config.yaml": OmegaConf.to_yaml(OmegaConf.create(compose(overrides, resolve=False))),
              "overrides.yaml": OmegaConf.to_yaml(OmegaConf.create(overrides))}
    with lease_device(cfg["device"]) as device:
        return loop.run({**cfg, "device": device}, Path(run_dir), record)


def load(*paths: str | Path) -> Any:
    """Every job below ``paths`` (runs, sweeps or folders of either) as one pandas DataFrame, one
    row per job and evaluated round: ``job`` (its directory), ``status``, ``seed``, the config
    keys that differ between the jobs (dotted), then the rounds.csv columns. A job with no rows
    has one row with ``round`` empty, so its status shows. A list or dict value is its JSON text
    (so every column can be grouped on); integer columns are pandas' nullable ``Int64``."""
    import pandas as pd

    from fedmoo.report.jobs import find_jobs

    if not paths:
        raise UserError("load() needs at least one run or sweep directory")
    jobs = find_jobs(list(paths))
    identities = [j.identity() for j in jobs]
    keys = sorted({k for ident in identities for k in ident})
    varying = [k for k in keys
               if len({repr(ident.get(k, "<unset>")) for ident in identities}) > 1]
    frames = []
    for job, ident in zip(jobs, identities):
        rows = job.rounds()
        head = {"job": str(job.path), "status": job.status, "seed": job.seed}
        for k in varying:        # a list or dict as JSON text: pandas cannot group on lists
            v = ident.get(k)
            head[k] = json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v
        if rows.empty:
            frames.append(pd.DataFrame([{**head, "round": None}]))
        else:
            frames.append(pd.concat([pd.DataFrame([head] * len(rows), index=rows.index), rows],
                                    axis=1))
    # integer columns: every value, in every job that has one, is an integer (judged per job:
    # a job without the column turns it into floats once the frames are joined)
    ints: dict[str, bool] = {}
    for f in frames:
        for col in f.columns:
            values = f[col].dropna().tolist()
            if values:
                ints[col] = ints.get(col, True) and all(integer(v) for v in values)
    frame = pd.concat(frames, ignore_index=True)
    cols = [col for col, yes in ints.items() if yes]
    frame[cols] = frame[cols].astype("Int64")
    return frame
