"""The before-pass (``loss_before`` / ``acc_before``: w_t on each cohort client's training set)
is skipped on rounds that write no rounds.csv row when the algorithm does not read it
(``Algorithm.reads_before``; which rules read it: tests/algorithms/test_reads_before.py).
Skipping it changes no number: the engines train the same, the rows and the model are those of
the run that measures it every round, alone and trained together."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch

from fedmoo.engine.base import LocalSGD
from fedmoo.algorithms.fedmgda import FedMGDA
from fedmoo.cli.config import compose
from fedmoo.engine import stacked
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.sequential import SequentialEngine
from fedmoo.models.linear import MLP, LogReg
from fedmoo.params import get_flat
from fedmoo.run import group, loop
from fedmoo.state import ClientSpec
from tests.engine.helpers import federation
from tests.run.test_group import _compare

SIZES = [7, 13, 4, 10, 9]


@pytest.mark.parametrize("engine,model,batch", [
    ("sequential", "mlp", 4), ("batched", "mlp", 4),
    ("batched", "logreg", 4),            # the closed-form head, minibatches
    ("batched", "logreg", None),         # the closed form's full batches: measured in step one
])
def test_an_engine_without_the_before_pass_trains_the_same(engine, model, batch):
    torch.manual_seed(0)
    data = federation(SIZES, (6,), 3)
    net = (MLP((6,), 3, hidden=(5,)) if model == "mlp" else LogReg((6,), 3)).double()
    make = SequentialEngine if engine == "sequential" else BatchedEngine
    eng = make(copy.deepcopy(net), data, LocalSGD(lr=0.1, batch_size=batch))
    w, ids = get_flat(net), torch.tensor([4, 0, 2])
    a = eng.train(ids, w, ClientSpec(), 3)
    b = eng.train(ids, w, ClientSpec(measure_before=False), 3)
    assert a.loss_before is not None and a.acc_before is not None
    assert b.loss_before is None and b.acc_before is None
    for name in ("deltas", "loss_after", "num_samples"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def _cfg(engine: str, algo: str = "fedmgda_plus", **more):
    return compose(["data=synthetic", "num_clients=6", "clients_per_round=3", "rounds=5",
                    "eval_every=2", "data.max_samples=60", f"engine={engine}", f"algo={algo}",
                    "precision=float64", "device=cpu", "progress=false", "checkpoint_every=0",
                    "model=mlp", "model.hidden=[4]", "client.batch_size=8",
                    *[f"{k}={v}" for k, v in more.items()]])


def _measured(monkeypatch) -> list[bool]:
    """Records ``spec.measure_before`` of every round's training call."""
    seen = []
    train_seq, train_rows = SequentialEngine.train, stacked.train_rows

    def seq(self, ids, w, spec, seed):
        seen.append(spec.measure_before)
        return train_seq(self, ids, w, spec, seed)

    def rows(engine, members):
        seen.extend(m.spec.measure_before for m in members)
        return train_rows(engine, members)

    monkeypatch.setattr(SequentialEngine, "train", seq)
    monkeypatch.setattr("fedmoo.engine.batched.train_rows", rows)
    return seen


@pytest.mark.parametrize("engine", ["sequential", "batched"])
def test_a_run_skips_the_pass_where_no_row_is_written_and_ends_the_same(tmp_path, engine,
                                                                       monkeypatch):
    seen = _measured(monkeypatch)
    loop.run(_cfg(engine), tmp_path / "skips")
    assert seen == [False, True, False, True, True]      # rows after rounds 2, 4 and 5
    seen.clear()
    monkeypatch.setattr(FedMGDA, "reads_before", True)   # as if the rule read it
    loop.run(_cfg(engine), tmp_path / "measures")
    assert seen == [True] * 5
    _compare(tmp_path / "skips", tmp_path / "measures")
    rows = pd.read_csv(tmp_path / "skips" / "rounds.csv")
    assert rows["round"].tolist() == [2, 4, 5] and rows["train/loss_mean"].notna().all()


def test_a_rule_that_reads_it_gets_it_every_round(tmp_path, monkeypatch):
    seen = _measured(monkeypatch)
    loop.run(_cfg("sequential", "qfedavg"), tmp_path)
    assert seen == [True] * 5


def test_runs_trained_together_skip_it_each_as_alone(tmp_path, monkeypatch):
    cfgs = [_cfg("batched"), _cfg("batched", "qfedavg"), _cfg("batched", seed=1)]
    for i, cfg in enumerate(cfgs):
        loop.run(cfg, tmp_path / "alone" / str(i))
    seen = _measured(monkeypatch)
    group.run_jobs([group.Job(c, tmp_path / "grouped" / str(i)) for i, c in enumerate(cfgs)])
    assert seen == [False, True, False] + [True] * 3 + [False, True, False] + [True] * 6
    for i in range(len(cfgs)):
        _compare(tmp_path / "alone" / str(i), tmp_path / "grouped" / str(i))
