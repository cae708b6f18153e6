"""engine.cuda_graph: the round's steps read their inputs from fixed tensors (fedmoo.engine.graph).
On a CPU the same steps run without capture; they must give the plain loop's results (float64;
the graph path passes the learning rate as a per-row tensor on every step, hence 1e-12, not 0).
The capture itself is checked on CUDA (tests/cuda)."""

from __future__ import annotations

import copy

import pytest
import torch

from fedmoo.engine.base import LocalSGD
from fedmoo import engine as fengine
from fedmoo.engine import stacked
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.graph import WARMUP, run_steps
from fedmoo.errors import UserError
from fedmoo.models.linear import MLP, LogReg
from fedmoo.params import get_flat
from fedmoo.state import ClientSpec
from tests.engine.helpers import federation, rel
from tests.engine.test_engine_equivalence import FAMILIES

SIZES = [7, 13, 4, 10, 9]   # unequal clients: rows finish at different steps, short last batches


def pair(model, data, program="auto", **client):
    client.setdefault("lr", 0.1)
    client.setdefault("batch_size", 4)
    sgd = LocalSGD(**client)
    plain = BatchedEngine(copy.deepcopy(model).double(), data, sgd, program=program)
    graphed = BatchedEngine(copy.deepcopy(model).double(), data, sgd, program=program,
                            cuda_graph=True)
    return plain, graphed


@pytest.mark.parametrize("family,program", [("mlp", "lockstep"), ("cnn", "lockstep"),
                                            ("cnn", "vmap"), ("lstm", "vmap")])
def test_fixed_tensor_steps_agree_with_the_plain_loop(family, program, monkeypatch):
    calls = []
    real = stacked.train_steps_graphed
    monkeypatch.setattr(stacked, "train_steps_graphed",
                        lambda *a, **k: calls.append(k["capture"]) or real(*a, **k))
    make, shape, classes, tokens = FAMILIES[family]
    torch.manual_seed(0)
    data = federation(SIZES, shape, classes, tokens=tokens)
    plain, graphed = pair(make(), data, program, epochs=2, momentum=0.5, weight_decay=0.01)
    w = get_flat(plain.model)
    ids = torch.tensor([4, 0, 2, 1])
    spec = ClientSpec(prox_mu=0.3)
    a, b = plain.train(ids, w, spec, 3), graphed.train(ids, w, spec, 3)
    for name in ("deltas", "loss_before", "loss_after"):
        assert rel(getattr(b, name), getattr(a, name)) < 1e-12, name
    assert float(a.deltas.norm()) > 0
    assert calls == [False]            # the graphed engine took the fixed-tensor path, uncaptured


def test_ditto_personal_rows_agree():
    torch.manual_seed(3)
    data = federation(SIZES, (6,), 3)
    model = MLP((6,), 3, hidden=(5,))
    d = sum(p.numel() for p in model.parameters())
    spec = ClientSpec(personal=torch.randn(3, d, dtype=torch.float64) * 0.3, personal_lam=0.5)
    plain, graphed = pair(model, data, "lockstep")
    w = get_flat(plain.model)
    a, b = plain.train(torch.tensor([4, 2, 3]), w, spec, 1), graphed.train(torch.tensor([4, 2, 3]), w, spec, 1)
    assert rel(b.deltas, a.deltas) < 1e-12 and rel(b.personal, a.personal) < 1e-12


def test_run_steps_loads_each_step_before_its_body():
    seen = []
    loaded = []
    run_steps(lambda: seen.append(loaded[-1]), loaded.append, steps=WARMUP + 4, capture=False)
    assert seen == list(range(WARMUP + 4))


def test_the_engine_names_the_graph():
    data = federation(SIZES, (6,), 3)
    _, graphed = pair(MLP((6,), 3, hidden=(5,)), data, "lockstep")
    assert graphed.name == "batched (lockstep program, CUDA graph)"


def test_per_task_rounds_say_once_that_they_run_without_the_graph(caplog):
    from fedmoo.state import TaskTraining
    from tests.engine.test_engine_fmol import model, multitask_federation
    data = multitask_federation()
    plain = BatchedEngine(model().double(), data, LocalSGD(lr=0.1, batch_size=4))
    graphed = BatchedEngine(model().double(), data, LocalSGD(lr=0.1, batch_size=4), cuda_graph=True)
    w, spec, ids = get_flat(plain.model), ClientSpec(task_training=TaskTraining(2, False)), torch.tensor([0, 3])
    a = plain.train(ids, w, spec, 1)
    with caplog.at_level("WARNING", logger="fedmoo.engine.batched"):
        b = graphed.train(ids, w, spec, 1)
        graphed.train(ids, w, spec, 2)
    assert torch.equal(a.deltas, b.deltas)    # the same per-task loop as without the option
    said = [r.getMessage() for r in caplog.records]
    assert said == ["engine.cuda_graph=true: per-task training (FMGDA / FSMGDA rounds) runs its "
                    "steps without a CUDA graph"]


@pytest.mark.parametrize("opts,message", [
    ({"cuda_graph": True}, "engine.cuda_graph=true needs a CUDA device"),
    ({"cuda_graph": "yes"}, "engine.cuda_graph='yes' must be true or false"),
    ({"cuda_graph": True, "gpu": 1}, "engine.gpu is not an option of engine=batched"),
])
def test_bad_options_are_one_line(opts, message):
    data = federation(SIZES, (6,), 3)
    with pytest.raises(UserError, match=message):
        fengine.build({"name": "batched", **opts}, MLP((6,), 3).double(), data,
                      LocalSGD(lr=0.1, batch_size=4))


def test_graph_with_compile_or_the_closed_form_head_is_refused():
    data = federation(SIZES, (6,), 3)
    with pytest.raises(UserError, match="cannot be combined"):
        BatchedEngine(MLP((6,), 3).double(), data, LocalSGD(0.1, 4), compile=True, cuda_graph=True)
    with pytest.raises(UserError, match="closed-form softmax regression"):
        BatchedEngine(LogReg((6,), 3).double(), data, LocalSGD(0.1, 4), cuda_graph=True)
