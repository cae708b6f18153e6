"""A grouped job's numbers do not depend on its group (hydra/launcher=lockstep): in float32, one job trained alone, in a group of 4 and in a group of 15 runs
whose members differ from it in seed, algorithm, cohort size, batch width, full batch, local
steps, epochs, momentum, weight decay, proximal term, Ditto's personal rows and a label-flipping
attack writes the same rounds.csv and model.pt, bit for bit. Real data (scikit-learn's digits),
both ways the batched engine trains: the closed-form softmax regression and an MLP through the
lockstep program. The control: a learning rate 2e-7 apart moves the numbers, so the comparison
sees rounding."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from fedmoo.cli.config import compose
from fedmoo.run import group

BASE = ["data=digits", "num_clients=6", "clients_per_round=3", "rounds=3", "eval_every=1",
        "engine=batched", "precision=float32", "device=cpu", "progress=false",
        "client.batch_size=16", "client.lr=0.05"]
TARGET = ["seed=0", "algo=fedavg"]
OTHERS = [
    ["seed=0", "algo=fedprox", "algo.mu=0.1"],
    ["seed=0", "algo=ditto"],
    ["seed=1", "algo=fedavg", "client.lr=0.1"],
    ["seed=0", "algo=fedavg", "client.batch_size=null"],
    ["seed=0", "algo=fedavg", "client.momentum=0.9"],
    ["seed=0", "algo=fedavg", "client.local_steps=5"],
    ["seed=0", "algo=qfedavg"],
    ["seed=0", "algo=fedfv"],
    ["seed=2", "algo=fedavg", "clients_per_round=6"],
    ["seed=0", "algo=fedavg", "attack=label_flip", "attack.malicious=[0,1]"],
    ["seed=0", "algo=fedavg", "client.weight_decay=0.01"],
    ["seed=0", "algo=fedavg", "client.epochs=2"],
    ["seed=0", "algo=fedavg", "client.batch_size=32"],
    ["seed=0", "algo=fedavg", "num_clients=4", "clients_per_round=4"],
]


def _target_rows(tmp_path, model: str, others: list[list[str]], target: list[str] = TARGET):
    cfgs = [compose(BASE + [f"model={model}"] + o) for o in [target] + others]
    plans = []
    outcomes = group.run_jobs([group.Job(c, tmp_path / str(i)) for i, c in enumerate(cfgs)],
                              on_plan=plans.append)
    assert all(isinstance(o, group.RunResult) for o in outcomes), outcomes
    assert [len(g) for g in plans[0].groups] == [len(cfgs)] and plans[0].alone == []
    rows = pd.read_csv(tmp_path / "0" / "rounds.csv")
    rows = rows[[c for c in rows.columns if not c.startswith("time/")]]
    return rows, torch.load(tmp_path / "0" / "model.pt")


def _same(a, b) -> bool:
    (ra, ma), (rb, mb) = a, b
    return (list(ra.columns) == list(rb.columns) and ra.equals(rb)
            and all(torch.equal(ma[k], mb[k]) for k in ma))


@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_grouped_job_is_bit_identical_to_the_job_alone(tmp_path, model):
    alone = _target_rows(tmp_path / "1", model, [])
    assert next(iter(alone[1].values())).dtype == torch.float32
    assert len(alone[0]) == 3
    for size in (4, 15):
        together = _target_rows(tmp_path / str(size), model, OTHERS[:size - 1])
        assert _same(alone, together), f"{model}: group of {size} differs from the job alone"


def test_rounding_moves_the_numbers(tmp_path):
    """The control: the job with a learning rate 2e-7 apart (a few float32 roundings) gives other
    float32 numbers, so the comparison would see a group's rounding; beside runs of its seed
    (which read the same gathered inputs) the job is the job alone."""
    same_seed = [OTHERS[0], OTHERS[7], OTHERS[8]]
    alone = _target_rows(tmp_path / "1", "logreg", [])
    nudged = TARGET + ["client.lr=0.05000001"]
    assert not _same(alone, _target_rows(tmp_path / "nudged", "logreg", [], nudged))
    assert _same(alone, _target_rows(tmp_path / "4", "logreg", same_seed))
