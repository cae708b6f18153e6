"""Runs trained together (``train_many``): runs of one seed and partition share their plans
(and, for large full batches, one gathered copy of each source's inputs), and each run's rows
keep their own shapes, so every run ends bit for bit as alone, in float32 too."""

from __future__ import annotations

import copy

import pytest
import torch

from fedmoo.engine import linear_head, stacked
from fedmoo.engine.batched import BatchedEngine
from fedmoo.engine.base import LocalSGD, Member
from fedmoo.models.linear import MLP, LogReg
from fedmoo.params import get_flat
from fedmoo.state import ClientSpec
from tests.engine.helpers import federation
from tests.engine.test_engine_equivalence import assert_same_cohort

SIZES = [7, 13, 4, 10, 9]
IDS = [4, 0, 2]
FLIP = torch.tensor([[3, 2, 1, 0], [0, 1, 2, 3], [1, 2, 3, 0]])

# (client settings, spec) per member; all members of a case share the batch plan
MEMBERS = [   # two ask for their trained models' loss (q-FedAvg's loss_at=after), measured together
    ({"lr": 0.3}, {"eval_trained": True}),
    ({"lr": 0.1, "momentum": 0.9}, {"prox_mu": 0.3}),
    ({"lr": 0.2, "weight_decay": 0.01}, {"loss_scale": [1.0, -2.0, 0.5]}),
    ({"lr": 0.25, "momentum": 0.5}, {"label_map": True, "prox_mu": 0.1, "eval_trained": True}),
]
DITTO = ({"lr": 0.15}, {"personal": True, "personal_lam": 0.5, "label_map": True})


def _spec(kw: dict, d: int, gen: torch.Generator, dtype=torch.float64) -> ClientSpec:
    kw = dict(kw)
    if "loss_scale" in kw:
        kw["loss_scale"] = torch.tensor(kw["loss_scale"], dtype=dtype)
    if kw.get("personal"):
        kw["personal"] = torch.randn(len(IDS), d, generator=gen, dtype=dtype) * 0.3
    if kw.get("label_map"):
        kw["label_map"] = FLIP.clone()
    return ClientSpec(**kw)


def _members(model, data, cases, batch: dict, seeds, dtype=torch.float64):
    """One member per (case, seed), each with its own engine and a random global model."""
    gen = torch.Generator().manual_seed(3)
    d = sum(p.numel() for p in model.parameters())
    out = []
    for seed in seeds:
        for client, spec in cases:
            engine = BatchedEngine(copy.deepcopy(model).to(dtype), data,
                                   LocalSGD(**client, **batch))
            w = get_flat(engine.model) + 0.2 * torch.randn(d, generator=gen, dtype=dtype)
            out.append(Member(engine, torch.tensor(IDS), w, _spec(spec, d, gen, dtype), seed))
    return out


def _alone(members, monkeypatch):
    """Each member trained by itself (the per-row path)."""
    return [mb.engine.train(mb.ids, mb.w, mb.spec, mb.seed) for mb in members]


@pytest.mark.parametrize("softmax_output", [False, True])
@pytest.mark.parametrize("batch", [{"batch_size": None, "epochs": 2},
                                   {"batch_size": 3, "epochs": 2},
                                   {"batch_size": 4, "local_steps": 5}])
@pytest.mark.parametrize("ditto", [False, True])
def test_grouped_rows_agree_with_each_run_alone(softmax_output, batch, ditto, monkeypatch):
    torch.manual_seed(6)
    data = federation(SIZES, (2, 3), 4)
    model = LogReg((2, 3), 4, softmax_output=softmax_output)
    cases = [DITTO] * 2 if ditto else MEMBERS       # Ditto: 4 rows per source
    members = _members(model, data, cases, batch, seeds=[7, 8])
    expected = _alone(members, monkeypatch)
    for a, b in zip(expected, members[0].engine.train_many(members)):
        assert_same_cohort(a, b)


def test_unequal_sources_agree(monkeypatch):
    """A Ditto run beside a plain run of another seed: 2 rows per source for one, 1 for the
    other."""
    torch.manual_seed(2)
    data = federation(SIZES, (2, 3), 4)
    model = LogReg((2, 3), 4)
    members = (_members(model, data, [MEMBERS[1]], {"batch_size": 4}, [5])
               + _members(model, data, [DITTO], {"batch_size": 4}, [6]))
    expected = _alone(members, monkeypatch)
    for a, b in zip(expected, members[0].engine.train_many(members)):
        assert_same_cohort(a, b)


def test_other_models_keep_the_row_path(monkeypatch):
    torch.manual_seed(5)
    data = federation(SIZES, (2, 3), 4)
    members = _members(MLP((2, 3), 4, hidden=(5,)), data, MEMBERS[:2], {"batch_size": 4}, [3])
    assert members[0].engine.head is None
    expected = _alone(members, monkeypatch)
    for a, b in zip(expected, members[0].engine.train_many(members)):
        assert_same_cohort(a, b)


@pytest.mark.parametrize("model,reuse,tall", [
    ("logreg", False, False), ("logreg", True, False), ("logreg", "chunks", False),
    ("logreg", False, True), ("logreg", True, True), ("logreg", "chunks", True),
    ("mlp", False, False)])
def test_invariant_rows_are_bit_identical_in_float32(model, reuse, tall, monkeypatch):
    """The default: members of other widths (full batch, batch 3, 4), terms (momentum,
    proximal, decay), Ditto's personal rows, loss scales and label maps, two seeds, trained
    together in float32 give each member's cohort exactly as alone, on any number of threads,
    and in a group of 2 as in a group of 12. ``reuse``: rows of one source read one gathered
    copy of its inputs (full batches of large inputs), here for every batch; ``chunks``: every
    step runs chunk by chunk of samples (large full batches), here a sample a chunk (two with
    ``tall``); ``tall``: each source's rows stacked along M in one GEMM (large steps), a lone
    row beside a zero row, here for every step."""
    if reuse:
        monkeypatch.setattr(stacked, "REUSE_BYTES", 0)
    if reuse == "chunks":
        monkeypatch.setattr(linear_head, "CHUNK_BYTES", 1)
    if tall:
        monkeypatch.setattr(linear_head, "TALL_BYTES", 0)
    torch.manual_seed(7)
    data = federation(SIZES, (2, 3), 4)
    data.x = data.x.float()
    net = LogReg((2, 3), 4, softmax_output=True) if model == "logreg" else MLP((2, 3), 4, hidden=(5,))
    cases = MEMBERS + [DITTO]
    members = []
    for i, batch in enumerate(({"batch_size": None}, {"batch_size": 3, "epochs": 2},
                               {"batch_size": 4})):
        members += _members(net, data, cases[i:] + cases[:i], batch, [7, 8], torch.float32)[:4]
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            alone = [mb.engine.train(mb.ids, mb.w, mb.spec, mb.seed) for mb in members]
            for group in (members[:2], members):
                got = members[0].engine.train_many(group)
                for a, b in zip(alone, got):
                    for f in ("deltas", "loss_before", "acc_before", "loss_after", "personal",
                              "loss_trained", "acc_trained"):
                        x, y = getattr(a, f), getattr(b, f)
                        assert (x is None and y is None) or torch.equal(x, y), (n, len(group), f)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("k,out,b", [(800, 3, 655), (800, 3, 360), (112, 2, 10), (800, 10, 2),
                                     (80, 10, 100)])
def test_tall_products_keep_each_rows_bits(k, out, b):
    """``_tall`` (one thread, as the closed form runs it): each row's logits ``W_r h^T`` and
    weight gradient ``D_r h`` have the same bits alone (beside a zero row) as among G = 2 to 40
    rows of its source at any position, with several sources, and with the rows off a 64-byte
    boundary (copied)."""
    g = torch.Generator().manual_seed(k + b)
    h = torch.randn(3, b, k, generator=g)
    w = torch.randn(3 * 40, out, k, generator=g)
    d = torch.randn(3 * 40, out, b, generator=g)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for reuse in (2, 3, 13, 40):
            rows = torch.cat([torch.arange(s * 40, s * 40 + reuse) for s in range(3)])
            z = linear_head._tall(_off(w[rows]), h.transpose(1, 2), reuse)
            grad = linear_head._tall(_off(d[rows]), h, reuse)
            for i, r in enumerate(rows.tolist()):
                s = i // reuse
                alone = linear_head._tall(w[r:r + 1], h[s:s + 1].transpose(1, 2), 1)
                assert torch.equal(z[i], alone[0]), (reuse, i)
                assert torch.equal(grad[i], linear_head._tall(d[r:r + 1], h[s:s + 1], 1)[0])
    finally:
        torch.set_num_threads(threads)


def _off(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` 4 bytes off a 64-byte boundary."""
    return torch.empty(t.numel() + 1)[1:].view(t.shape).copy_(t)


def test_tall_steps_have_no_chunk_of_one_sample():
    """A GEMV (one sample) would give other bits: with ``tall`` the last sample joins the chunk
    before it, and chunks hold at least 2 samples."""
    assert linear_head._chunks(7, 3, True) == [slice(0, 3), slice(3, 7)]
    assert linear_head._chunks(7, 3, False) == [slice(0, 3), slice(3, 6), slice(6, 7)]
    assert linear_head._chunks(5, 1, True) == [slice(0, 2), slice(2, 5)]
    assert linear_head._chunks(4, 9, True) == [slice(0, 4)]
