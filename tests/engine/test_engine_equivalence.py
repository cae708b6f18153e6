"""The batched engine reproduces the sequential reference (same batches, same math), in float64."""

from __future__ import annotations

import pytest
import torch

from fedmoo.engine.base import LocalSGD
from fedmoo.models.linear import MLP, LogReg
from fedmoo.engine.common import forward_stats
from fedmoo.params import get_flat, set_flat
from fedmoo.state import ClientSpec
from tests.engine.helpers import SmallCNN, TinyLSTM, both, federation, rel

TOL = 1e-10          # float64: only reduction order differs
SIZES = [7, 13, 4, 10, 9]   # unequal clients; with batch 4: short last batches, 1 to 4 steps
PROGRAMS = ("lockstep", "vmap")   # the batched engine's two programs (engine.program)
FIELDS = ("deltas", "num_samples", "loss_before", "loss_after", "acc_before", "personal",
          "loss_trained", "acc_trained")


def assert_same_cohort(a, b, tol=TOL):
    assert a.client_ids.tolist() == b.client_ids.tolist()
    assert a.deltas.dtype == b.deltas.dtype == torch.float64
    for name in FIELDS:
        va, vb = getattr(a, name), getattr(b, name)
        if va is None:
            assert vb is None, name
            continue
        assert va.shape == vb.shape, name
        assert rel(vb, va) < tol, (name, rel(vb, va))
    assert float(a.deltas.norm()) > 0  # training happened


def run_pair(model, data, ids, spec=None, seed=5, program="auto", **client):
    spec = ClientSpec() if spec is None else spec
    seq, bat = both(model, data, program, **client)
    w = get_flat(seq.model)
    return seq.train(torch.tensor(ids), w, spec, seed), bat.train(torch.tensor(ids), w, spec, seed)


FAMILIES = {
    "logreg": (lambda: LogReg((6,), 3), (6,), 3, False),
    "mlp": (lambda: MLP((2, 3), 3, hidden=(8, 5)), (2, 3), 3, False),
    "cnn": (lambda: SmallCNN(), (2, 8, 8), 3, False),
    "lstm": (lambda: TinyLSTM(), (5,), 5, True),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_model_families_agree(family):
    make, shape, classes, tokens = FAMILIES[family]
    torch.manual_seed(0)
    data = federation(SIZES, shape, classes, tokens=tokens)
    a, b = run_pair(make(), data, [4, 0, 2, 1], lr=0.2, batch_size=4)
    assert_same_cohort(a, b)


@pytest.mark.parametrize("family, program", [("logreg", True), ("mlp", True), ("cnn", True),
                                             ("lstm", False)])
def test_traceable_models_run_the_lockstep_program(family, program):
    """TinyLSTM loops over ``x.shape[1]`` in its forward, which torch.fx cannot trace: it runs
    vmap over the whole model (and still agrees, above)."""
    make, shape, classes, tokens = FAMILIES[family]
    _, bat = both(make(), federation([3, 4], shape, classes, tokens=tokens))
    assert (bat.program is not None) is program
    if program:                          # every nn.Linear is fused
        linears = {n for n, m in bat.model.named_modules() if isinstance(m, torch.nn.Linear)}
        assert set(bat.program.fused) == linears


@pytest.mark.parametrize("client", [
    {"batch_size": None, "epochs": 2},                            # full batch, unequal widths
    {"batch_size": 3, "epochs": 2},                               # short last batch each epoch
    {"batch_size": 4, "local_steps": 5},                          # steps across epochs
    {"batch_size": 5, "epochs": 2, "momentum": 0.9, "weight_decay": 0.01},
    {"batch_size": 20, "epochs": 1},                              # batch larger than every client
])
@pytest.mark.parametrize("program", PROGRAMS)
def test_client_configs_agree(client, program):
    torch.manual_seed(1)
    data = federation(SIZES, (2, 3), 3)
    a, b = run_pair(MLP((2, 3), 3, hidden=(6,)), data, [3, 1, 4, 0, 2], lr=0.1, program=program,
                    **client)
    assert_same_cohort(a, b)


@pytest.mark.parametrize("program", PROGRAMS)
def test_fedprox_term_agrees_and_matters(program):
    torch.manual_seed(2)
    data = federation(SIZES, (6,), 3)
    model = MLP((6,), 3, hidden=(5,))
    a, b = run_pair(model, data, [0, 1, 2], ClientSpec(prox_mu=0.7), batch_size=3, epochs=3,
                    program=program)
    assert_same_cohort(a, b)
    plain, _ = run_pair(model, data, [0, 1, 2], ClientSpec(), batch_size=3, epochs=3)
    assert rel(a.deltas, plain.deltas) > 1e-3  # the proximal term changed the updates


@pytest.mark.parametrize("program", PROGRAMS)
def test_ditto_personal_models_agree(program):
    torch.manual_seed(3)
    data = federation(SIZES, (6,), 3)
    model = MLP((6,), 3, hidden=(5,))
    d = sum(p.numel() for p in model.parameters())
    personal = torch.randn(3, d, dtype=torch.float64) * 0.3
    spec = ClientSpec(personal=personal, personal_lam=0.5, prox_mu=0.1)
    a, b = run_pair(model, data, [4, 2, 3], spec, batch_size=4, momentum=0.5, weight_decay=0.01,
                    program=program)
    assert_same_cohort(a, b)
    assert rel(b.personal, personal) > 1e-3
    assert torch.equal(spec.personal, personal)  # the caller's tensor is not modified


def test_loss_scale_agrees():
    torch.manual_seed(4)
    data = federation(SIZES, (6,), 3)
    spec = ClientSpec(loss_scale=torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    a, b = run_pair(LogReg((6,), 3), data, [0, 3, 1], spec, batch_size=4)
    assert_same_cohort(a, b)


def test_label_map_agrees_and_matters():
    """Relabelled clients (label-flip attack) train and report loss/acc on mapped labels, in both engines."""
    torch.manual_seed(7)
    data = federation(SIZES, (6,), 3)
    label_map = torch.tensor([[0, 1, 2], [2, 1, 0], [1, 2, 0]])
    spec = ClientSpec(label_map=label_map)
    ids = [2, 0, 4]
    model = MLP((6,), 3, hidden=(5,))
    a, b = run_pair(model, data, ids, spec, batch_size=4, epochs=2, momentum=0.5)
    assert_same_cohort(a, b)
    plain, _ = run_pair(model, data, ids, ClientSpec(), batch_size=4, epochs=2, momentum=0.5)
    assert torch.equal(a.deltas[0], plain.deltas[0])          # identity row: untouched client
    assert rel(a.deltas[1:], plain.deltas[1:]) > 1e-3          # relabelled clients train differently
    assert a.loss_before[0] == plain.loss_before[0]
    assert not torch.allclose(a.loss_before[1:], plain.loss_before[1:])
    # acc_before of client 0 (ids[1]) under pi = reverse: accuracy of w against 2 - y
    seq, _ = both(model, data)  # a fresh copy at the same initial weights
    idx = data.train.of(0)
    pred = seq.model(data.x[idx]).argmax(1)
    want = 100.0 * float((pred == 2 - data.y[idx]).double().mean())
    assert abs(float(a.acc_before[1]) - want) < 1e-9 and abs(float(b.acc_before[1]) - want) < 1e-9


@pytest.mark.parametrize("program", PROGRAMS)
def test_post_training_loss_agrees_and_is_the_trained_models(program):
    """ClientSpec.eval_trained (q-FedAvg loss_at=after, FedFA acc_at=after): both engines report
    the loss and accuracy of each trained local model on its whole training set, against the
    labels the client trains on (a relabelled client's too)."""
    torch.manual_seed(8)
    data = federation(SIZES, (2, 3), 3)
    ids = [3, 1, 4]
    label_map = torch.tensor([[0, 1, 2], [2, 1, 0], [0, 1, 2]])
    spec = ClientSpec(eval_trained=True, label_map=label_map)
    net = MLP((2, 3), 3, hidden=(6,))
    a, b = run_pair(net, data, ids, spec, program=program, batch_size=3, epochs=2, momentum=0.5)
    assert_same_cohort(a, b)
    seq, _ = both(net, data)
    w = get_flat(seq.model)
    for i, k in enumerate(ids):          # by hand: w_k = w_t - g_k on client k's training set
        set_flat(seq.model, w - a.deltas[i])
        idx = data.train.of(k)
        loss, correct = forward_stats(seq.model, data.x, data.y, idx, data.task,
                                      targets=label_map[i][data.y[idx]])
        assert abs(float(a.loss_trained[i] - loss.mean())) < 1e-12
        assert abs(float(a.acc_trained[i] - 100.0 * correct.mean())) < 1e-9
    assert bool((a.loss_trained < a.loss_before).all())      # training lowered every client's loss
    plain, _ = run_pair(net, data, ids, ClientSpec(label_map=label_map), program=program,
                        batch_size=3, epochs=2, momentum=0.5)
    assert plain.loss_trained is None and plain.acc_trained is None
    assert torch.equal(plain.deltas, a.deltas)                # measuring does not change training


def test_fedmgda_plus_inputs_agree():
    """FedMGDA+ trains clients like FedAvg and consumes normalised deltas through their Gram matrix."""
    torch.manual_seed(5)
    data = federation(SIZES, (6,), 3)
    a, b = run_pair(MLP((6,), 3, hidden=(4,)), data, [0, 1, 2, 3, 4], ClientSpec(), batch_size=4)
    ua = a.deltas / a.deltas.norm(dim=1, keepdim=True)
    ub = b.deltas / b.deltas.norm(dim=1, keepdim=True)
    assert rel(ub @ ub.T, ua @ ua.T) < TOL


def test_dropout_is_independent_per_client():
    """With dropout on, two clients holding the same data must not get the same update."""
    torch.manual_seed(6)
    data = federation([8, 8], (6,), 3)
    data.train.index[8:] = data.train.index[:8]  # client 1 owns exactly client 0's samples
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 3))
    _, bat = both(model, data, batch_size=None)
    out = bat.train(torch.tensor([0, 1]), get_flat(bat.model), ClientSpec(), seed=0)
    assert rel(out.deltas[0], out.deltas[1]) > 1e-3
    _, nodrop = both(torch.nn.Sequential(model[0], model[2]), data, batch_size=None)
    out = nodrop.train(torch.tensor([0, 1]), get_flat(nodrop.model), ClientSpec(), seed=0)
    assert rel(out.deltas[0], out.deltas[1]) < TOL


PAPER_MODELS = {   # the models of fedmoo.models, on tiny federations (dropout set to 0)
    "cnn_cifar": ({"name": "cnn_cifar"}, (3, 32, 32), 10, False),
    "cnn_fmnist": ({"name": "cnn_fmnist"}, (1, 28, 28), 10, False),
    "lstm_shakespeare": ({"name": "lstm_shakespeare", "hidden": 16}, (12,), 80, True),
    "resnet18_gn": ({"name": "resnet18_gn"}, (3, 16, 16), 10, False),
}


@pytest.mark.parametrize("name", sorted(PAPER_MODELS))
def test_paper_models_agree(name):
    from fedmoo import models

    cfg, shape, classes, tokens = PAPER_MODELS[name]
    torch.manual_seed(3)
    model = models.build(cfg, shape, classes).double()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
    data = federation([3, 5, 2], shape, classes, tokens=tokens)
    a, b = run_pair(model, data, [2, 0, 1], lr=0.05, batch_size=2)
    assert_same_cohort(a, b)
    assert both(model, data)[1].program is not None      # LSTMLayer brings stacked_forward


def test_compiled_vmap_program_agrees():
    """engine.compile=true (torch.compile of the vmap step; about 10 s of compiling on a CPU)."""
    from fedmoo.engine.batched import BatchedEngine

    torch.manual_seed(1)
    data = federation(SIZES, (2, 3), 3)
    model = MLP((2, 3), 3, hidden=(6,)).double()
    seq, _ = both(model, data, momentum=0.9)
    bat = BatchedEngine(model, data, LocalSGD(lr=0.1, batch_size=4, momentum=0.9), compile=True)
    assert bat.program is None and bat.name == "batched (vmap program, compiled)"
    spec, ids, w = ClientSpec(prox_mu=0.3), torch.tensor([3, 1, 4, 0, 2]), get_flat(model)
    assert_same_cohort(seq.train(ids, w, spec, 5), bat.train(ids, w, spec, 5))


@pytest.mark.parametrize("softmax_output", [False, True])
@pytest.mark.parametrize("spec, client", [
    ({}, {"batch_size": 4, "epochs": 2}),
    ({"prox_mu": 0.3, "loss_scale": [1.0, -2.0, 0.5]}, {"batch_size": None, "momentum": 0.9,
                                                         "weight_decay": 0.01}),
    ({"personal": True, "personal_lam": 0.5, "label_map": True}, {"batch_size": 3,
                                                                  "local_steps": 4}),
])
def test_closed_form_softmax_regression_agrees(softmax_output, spec, client):
    """LogReg trains without autograd (fedmoo.engine.linear_head), as the sequential engine."""
    torch.manual_seed(6)
    data = federation(SIZES, (2, 3), 4)
    model = LogReg((2, 3), 4, softmax_output=softmax_output)
    d = sum(p.numel() for p in model.parameters())
    kw = dict(spec)
    if "loss_scale" in kw:
        kw["loss_scale"] = torch.tensor(kw["loss_scale"], dtype=torch.float64)
    if kw.get("personal"):
        kw["personal"] = torch.randn(3, d, dtype=torch.float64) * 0.3
    if kw.get("label_map"):
        kw["label_map"] = torch.tensor([[3, 2, 1, 0], [0, 1, 2, 3], [1, 2, 3, 0]])
    seq, bat = both(model, data, "auto", lr=0.3, **client)
    assert bat.head is not None and bat.head.softmax_output is softmax_output
    assert bat.name == "batched (closed-form softmax regression)"
    w = get_flat(seq.model)
    a = seq.train(torch.tensor([4, 0, 2]), w, ClientSpec(**kw), 7)
    b = bat.train(torch.tensor([4, 0, 2]), w, ClientSpec(**kw), 7)
    assert_same_cohort(a, b)


@pytest.mark.parametrize("fold, one_step", [(True, False), (False, False), (True, True)])
def test_closed_form_bias_folded_or_apart(fold, one_step, monkeypatch):
    """The bias trains as the last input row (inputs with a column of ones) or on its own when
    that copy would be too large, and a run of steps gathers its inputs at once or step by step
    (GATHER_BYTES); all as the sequential engine, with unequal clients (rows that finish early
    leave the step) and per-row learning rates (Ditto's personal rows)."""
    from fedmoo.engine import linear_head

    monkeypatch.setattr(linear_head, "FOLD_BYTES", linear_head.FOLD_BYTES if fold else 0)
    monkeypatch.setattr(linear_head, "GATHER_BYTES", 1 if one_step else linear_head.GATHER_BYTES)
    torch.manual_seed(3)
    data = federation(SIZES, (2, 3), 4)
    model = LogReg((2, 3), 4)
    d = sum(p.numel() for p in model.parameters())
    seq, bat = both(model, data, "auto", lr=0.3, batch_size=2, momentum=0.5)
    spec = ClientSpec(personal=torch.randn(3, d, dtype=torch.float64) * 0.3, personal_lam=0.5)
    w = get_flat(seq.model)
    ids = torch.tensor([4, 0, 2])
    assert_same_cohort(seq.train(ids, w, spec, 3), bat.train(ids, w, spec, 3))
    assert (bat.head._ones is not None) is fold


@pytest.mark.parametrize("batch_size", [None, 2])
def test_closed_form_steps_in_chunks_of_samples(batch_size, monkeypatch):
    """A step of more samples than CHUNK_BYTES of inputs runs chunk by chunk (here a sample a
    chunk), its gradient, loss and the first step's measures summed over the chunks; as the
    sequential engine, with a label map and loss factors."""
    from fedmoo.engine import linear_head

    monkeypatch.setattr(linear_head, "CHUNK_BYTES", 1)
    torch.manual_seed(5)
    data = federation(SIZES, (2, 3), 4)
    model = LogReg((2, 3), 4, softmax_output=True)
    seq, bat = both(model, data, "auto", lr=0.3, batch_size=batch_size, momentum=0.5)
    spec = ClientSpec(label_map=torch.tensor([[3, 2, 1, 0], [0, 1, 2, 3], [1, 2, 3, 0]]),
                      loss_scale=torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64))
    w = get_flat(seq.model)
    ids = torch.tensor([4, 0, 2])
    assert_same_cohort(seq.train(ids, w, spec, 3), bat.train(ids, w, spec, 3))


def test_closed_form_inputs_gathered_a_few_steps_at_a_time(monkeypatch):
    """Each step's inputs ``x[index[:, s]]``, in order, gathered as many steps at a time as fit
    in GATHER_BYTES (here 2 steps of 2 sources x 1 sample x 3 floats of 8 bytes)."""
    from fedmoo.engine import linear_head

    x = torch.arange(30, dtype=torch.float64).view(10, 3)
    index = torch.tensor([[[4], [1], [7], [0], [2]], [[9], [3], [3], [5], [8]]])   # [n=2, S=5, B=1]
    calls = []
    gather = linear_head.gather
    monkeypatch.setattr(linear_head, "gather", lambda t, i: calls.append(i.shape) or gather(t, i))
    monkeypatch.setattr(linear_head, "GATHER_BYTES", 2 * 2 * 3 * 8)
    steps = [list(chunks) for chunks in linear_head._inputs(x, index, [slice(0, 1)])]
    assert [tuple(c) for c in calls] == [(2, 2, 1), (2, 2, 1), (1, 2, 1)]
    assert len(steps) == 5
    for s, chunks in enumerate(steps):
        assert len(chunks) == 1 and torch.equal(chunks[0], x[index[:, s]])   # [n, B, in]


def test_closed_form_large_steps_gathered_chunk_by_chunk(monkeypatch):
    """A step of more samples than a chunk is gathered chunk by chunk, each chunk as it is
    read: ``x[index[:, s, c:c + size]]`` (here 2 sources x 5 samples in chunks of 2)."""
    from fedmoo.engine import linear_head

    x = torch.arange(30, dtype=torch.float64).view(10, 3)
    index = torch.tensor([[[4, 1, 7, 0, 2], [9, 3, 3, 5, 8]],
                          [[5, 6, 2, 1, 0], [8, 8, 4, 7, 9]]])               # [n=2, S=2, B=5]
    calls = []
    gather = linear_head.gather
    monkeypatch.setattr(linear_head, "gather", lambda t, i: calls.append(i.shape) or gather(t, i))
    steps = linear_head._inputs(x, index, linear_head._chunks(5, 2, False))
    for s in range(2):
        for c, chunk in zip((0, 2, 4), next(steps)):
            assert calls[-1] == (2, min(2, 5 - c))          # gathered when read
            assert torch.equal(chunk, x[index[:, s, c:c + 2]])
    assert len(calls) == 6 and next(steps, None) is None


def test_closed_form_only_for_softmax_regression():
    from fedmoo.engine.linear_head import LinearHead

    data = federation([3, 4], (6,), 3)
    assert both(LogReg((6,), 3), data)[1].head is not None
    assert both(LogReg((6,), 3), data, "lockstep")[1].head is None      # the generic program
    assert both(MLP((6,), 3, hidden=(4,)), data)[1].head is None
    lock = both(MLP((6,), 3, hidden=(4,)), data)[1].program
    assert LinearHead.match(lock, "classification") is None
    assert LinearHead.match(both(LogReg((6,), 3), data)[1].program, "regression") is None
