#!/usr/bin/env python
"""One job of a paper's sweep alone and in lockstep groups of other sizes: same rounds.csv?

    python scripts/check_group_invariance.py            # FedFV Table 3, q=15, seed 12
    python scripts/check_group_invariance.py --rounds 20 --sizes 1,2,13

The target job (``--row``, ``--seed``) trains with ``fedmoo.run.group.run_jobs`` (as
``hydra/launcher=lockstep``) alone, then with the first other rows of its seed, then with rows
of other seeds, in groups of each of ``--sizes``. It prints the target's last accuracies in each
and whether its rounds.csv (time columns aside) equals the one alone, bit for bit
(docs/scaling.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedmoo.cli.config import compose  # noqa: E402
from fedmoo.cli.groups import CONF_DIR  # noqa: E402
from fedmoo.run import group  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="fedfv/table3")
    ap.add_argument("--row", default="qfedavg_q15")
    ap.add_argument("--seed", default="12")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--sizes", default="1,4,15")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    conf = yaml.safe_load((CONF_DIR / "experiment" / f"{args.experiment}.yaml").read_text())
    params = conf["hydra"]["sweeper"]["params"]
    key = next(k for k in params if k != "seed")
    rows = str(params[key]).split(",")
    seeds = [s for s in str(params["seed"]).split(",") if s != args.seed]
    base = [f"experiment={args.experiment}", f"rounds={args.rounds}", "progress=false",
            "checkpoint_every=0", *args.set]
    target = base + [f"{key}={args.row}", f"seed={args.seed}"]
    others = [base + [f"{key}={r}", f"seed={args.seed}"] for r in rows if r != args.row]
    others += [base + [f"{key}={r}", f"seed={s}"] for s in seeds for r in rows]
    root = Path(tempfile.mkdtemp(prefix="fedmoo-group-invariance-"))
    found = {}
    for size in (int(n) for n in args.sizes.split(",")):
        cfgs = [compose(c) for c in [target] + others[:size - 1]]
        out = group.run_jobs([group.Job(c, root / str(size) / str(i)) for i, c in enumerate(cfgs)])
        if not isinstance(out[0], group.RunResult):
            raise SystemExit(f"the target job failed in a group of {size}: {out[0]}")
        r = pd.read_csv(root / str(size) / "0" / "rounds.csv")
        found[size] = r[[c for c in r.columns if not c.startswith("time/")]]
        last = found[size].filter(like="test/acc_client").iloc[-1].round(4).to_dict()
        same = found[size].equals(next(iter(found.values())))
        print(f"group of {size:>3}: {last}; rounds.csv {'equal to' if same else 'DIFFERS from'} "
              f"the first", flush=True)
    return 0 if all(f.equals(next(iter(found.values()))) for f in found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
