"""fedmoo rules as Flower strategies give the same next global model as ``server_update``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedmoo[flower]')")

from flwr.app import ArrayRecord, Message, Metadata, MetricRecord, RecordDict
from flwr.common import (
    Code,
    FitRes,
    MessageType,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_proxy import ClientProxy

from fedmoo.engine.base import LocalSGD
from fedmoo import algorithms
from fedmoo.errors import UserError
from fedmoo.flower import FedmooFitStrategy, FedmooStrategy, LocalTrainer
from fedmoo.flower.client import FedmooClient, trainable_arrays
from fedmoo.state import Cohort

N = 5
SHAPES = [(3, 4), (3,)]
LR = 0.1
# Rules a Flower strategy cannot carry, and why (checked below, not silently skipped).
PERSONAL = {"ditto"}                   # personal models live in the server state
MULTI_TASK = {"fmgda", "fsmgda"}       # deltas are [K, S, d] per task, not one model update


class Proxy(ClientProxy):
    """Only ``cid`` is used by aggregate_fit."""

    def get_properties(self, ins, timeout, group_id):
        raise NotImplementedError

    def get_parameters(self, ins, timeout, group_id):
        raise NotImplementedError

    def fit(self, ins, timeout, group_id):
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


def _flat(arrays):
    return torch.cat([torch.as_tensor(a).reshape(-1) for a in arrays])


def _round_inputs(rng, w_arrays):
    """Clients 0..N-1: trained arrays w_k = w_t - g_k, sample counts and reported scalars."""
    out = []
    for k in range(N):
        local = [(a - rng.normal(0, 0.1, a.shape)).astype(np.float32) for a in w_arrays]
        metrics = {"client_id": k, "loss_before": float(rng.uniform(0.5, 3.0)),
                   "loss_after": float(rng.uniform(0.2, 2.0)),
                   "acc_before": float(rng.uniform(10, 90)), "lr": LR}
        out.append((local, int(rng.integers(5, 50)), metrics))
    return out


def _reference_cohort(w, inputs):
    dt = w.dtype
    return Cohort(
        client_ids=torch.arange(N), deltas=w.unsqueeze(0) - torch.stack([_flat(a) for a, _, _ in inputs]),
        num_samples=torch.tensor([float(n) for _, n, _ in inputs], dtype=dt),
        loss_before=torch.tensor([m["loss_before"] for _, _, m in inputs], dtype=dt),
        loss_after=torch.tensor([m["loss_after"] for _, _, m in inputs], dtype=dt),
        acc_before=torch.tensor([m["acc_before"] for _, _, m in inputs], dtype=dt), local_lr=LR)


@pytest.mark.parametrize("name", algorithms.names())
def test_aggregate_fit_equals_server_update(name):
    if name in MULTI_TASK:
        pytest.skip(f"{name} trains one update per task ([K, S, d] deltas); a Flower round "
                    "exchanges one model per client")
    rng = np.random.default_rng(0)
    w0 = [rng.normal(0, 1, s).astype(np.float32) for s in SHAPES]
    if name in PERSONAL:
        with pytest.raises(UserError, match="personal model"):
            FedmooFitStrategy(name, w0, num_clients=N)
        return
    strategy = FedmooFitStrategy(name, w0, num_clients=N)   # full participation (AFL needs it)
    ref = algorithms.build({"name": name})
    state = ref.init(_flat(w0), num_clients=N)
    current = w0
    for rnd in (1, 2):                  # two rounds: state that crosses rounds must match too
        inputs = _round_inputs(rng, current)
        order = rng.permutation(N)      # Flower returns results in completion order
        results = [(Proxy(f"node{k}"), FitRes(Status(Code.OK, ""), ndarrays_to_parameters(inputs[k][0]),
                                              inputs[k][1], inputs[k][2])) for k in order]
        torch.manual_seed(rnd)
        params, diag = strategy.aggregate_fit(rnd, results, [])
        torch.manual_seed(rnd)
        state, ref_diag = ref.server_update(state, _reference_cohort(state.w, inputs))
        current = parameters_to_ndarrays(params)
        assert [a.shape for a in current] == SHAPES and all(a.dtype == np.float32 for a in current)
        torch.testing.assert_close(_flat(current), state.w, rtol=0, atol=0)
        assert {k: diag[k] for k in ref_diag} == pytest.approx(ref_diag)
    assert strategy.rule.state.round == 2


def _reply(arrays, n, metrics, node):
    meta = Metadata(run_id=1, message_id=f"m{node}", src_node_id=node, dst_node_id=0,
                    reply_to_message_id="q", group_id="1", created_at=0.0, ttl=60.0,
                    message_type=MessageType.TRAIN)
    content = RecordDict({"arrays": ArrayRecord(arrays),
                          "metrics": MetricRecord({**metrics, "num-examples": n})})
    return Message(content=content, metadata=meta)


@pytest.mark.parametrize("name", ["fedavg", "qfedavg"])
def test_message_api_aggregate_train_equals_server_update(name):
    if name not in algorithms.names():
        pytest.skip(f"{name} is not registered in this checkout")
    rng = np.random.default_rng(1)
    w0 = [rng.normal(0, 1, s).astype(np.float32) for s in SHAPES]
    strategy = FedmooStrategy(name, w0, num_clients=N, clients_per_round=N)
    inputs = _round_inputs(rng, w0)
    replies = [_reply(*inputs[k], node=100 + k) for k in rng.permutation(N)]
    arrays, metrics = strategy.aggregate_train(1, replies)
    ref = algorithms.build({"name": name})
    state, diag = ref.server_update(ref.init(_flat(w0), N), _reference_cohort(_flat(w0), inputs))
    torch.testing.assert_close(_flat(arrays.to_numpy_ndarrays()), state.w, rtol=0, atol=0)
    assert metrics["server/d_norm"] == pytest.approx(diag["server/d_norm"])


def test_fedavg_strategy_by_hand():
    """Two clients, one 2-vector: FedAvg weights 1:3 -> w = 0.25 w_1 + 0.75 w_2 (exact)."""
    w0 = [np.array([1.0, 1.0], np.float32)]
    strategy = FedmooFitStrategy({"name": "fedavg", "weighting": "samples"}, w0, num_clients=2,
                                 local_lr=0.5)
    res = [(Proxy("b"), FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.array([3.0, -1.0], np.float32)]), 30, {})),
           (Proxy("a"), FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.array([-1.0, 1.0], np.float32)]), 10, {}))]
    params, diag = strategy.aggregate_fit(1, res, [])
    assert parameters_to_ndarrays(params)[0].tolist() == [2.0, -0.5]
    # d = 0.25 (2, 0) + 0.75 (-2, 2) = (-1, 1.5)
    assert diag["server/d_norm"] == pytest.approx(float(np.hypot(1.0, 1.5)))
    assert "train/loss_mean" not in diag    # no client reported loss_before


def test_strategy_rejects_bad_replies():
    w0 = [np.zeros((2, 2), np.float32)]
    strategy = FedmooFitStrategy("fedavg", w0, num_clients=2, local_lr=0.1)
    wrong = [(Proxy("a"), FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros(4, np.float32)]), 3, {}))]
    with pytest.raises(ValueError, match="shapes"):
        strategy.aggregate_fit(1, wrong, [])
    out_of_range = [(Proxy("a"), FitRes(Status(Code.OK, ""), ndarrays_to_parameters(w0), 3, {"client_id": 2}))]
    with pytest.raises(ValueError, match="outside"):
        strategy.aggregate_fit(1, out_of_range, [])
    assert strategy.aggregate_fit(1, [], []) == (None, {})


def _make_trainers(num):
    g = torch.Generator().manual_seed(5)
    trainers = []
    for k in range(num):
        model = torch.nn.Linear(4, 3)
        x = torch.randn(12 + k, 4, generator=g)
        y = torch.randint(0, 3, (12 + k,), generator=g)
        trainers.append(LocalTrainer(model, k, x, y, sgd=LocalSGD(lr=LR, batch_size=5, epochs=2),
                                     seed=3))
    return trainers


def test_local_trainer_matches_sequential_engine():
    """The client helper trains exactly like fedmoo's reference engine (same batches, scalars)."""
    from fedmoo.data.federated import ClientSplit, FederatedData
    from fedmoo.engine.sequential import SequentialEngine
    from fedmoo.state import ClientSpec

    trainer = _make_trainers(1)[0]
    torch.manual_seed(0)
    w = _flat(trainable_arrays(torch.nn.Linear(4, 3)))
    n = trainer.y.shape[0]
    data = FederatedData(x=trainer.x, y=trainer.y,
                         train=ClientSplit.from_lists([np.arange(n)]),
                         test=ClientSplit.from_lists([np.arange(n)]), val=None, num_classes=3,
                         input_shape=(4,), task="classification")
    engine = SequentialEngine(torch.nn.Linear(4, 3), data, LocalSGD(lr=LR, batch_size=5, epochs=2))
    cohort = engine.train(torch.tensor([0]), w, ClientSpec(prox_mu=0.3, eval_trained=True), seed=11)
    shapes = [(3, 4), (3,)]
    arrays = [w[:12].reshape(shapes[0]).numpy(), w[12:].numpy()]
    new, num, m = trainer.train(arrays, prox_mu=0.3, generator_seed=11, eval_trained=True)
    assert num == n and m["client_id"] == 0 and m["lr"] == LR
    torch.testing.assert_close(w - _flat(new), cohort.deltas[0])
    assert m["loss_before"] == pytest.approx(float(cohort.loss_before[0]))
    assert m["loss_after"] == pytest.approx(float(cohort.loss_after[0]))
    assert m["acc_before"] == pytest.approx(float(cohort.acc_before[0]))
    assert m["loss_trained"] == pytest.approx(float(cohort.loss_trained[0]))
    assert m["acc_trained"] == pytest.approx(float(cohort.acc_trained[0]))
    assert "loss_trained" not in trainer.train(arrays, generator_seed=11)[2]   # only when asked


def test_post_training_loss_reaches_the_rule_through_flower():
    """q-FedAvg with loss_at=after asks the clients for loss_trained (round config) and reads it."""
    rng = np.random.default_rng(2)
    w0 = [rng.normal(0, 1, s).astype(np.float32) for s in SHAPES]
    algo = {"name": "qfedavg", "loss_at": "after"}
    strategy = FedmooStrategy(algo, w0, num_clients=N, clients_per_round=N)
    assert strategy.rule.client_config()["eval_trained"] == 1.0
    inputs = _round_inputs(rng, w0)
    for _, _, m in inputs:
        m["loss_trained"], m["acc_trained"] = float(rng.uniform(0.1, 1.0)), 50.0
    arrays, _ = strategy.aggregate_train(1, [_reply(*inputs[k], node=100 + k) for k in range(N)])
    ref = algorithms.build(dict(algo))
    cohort = _reference_cohort(_flat(w0), inputs).replace(
        loss_trained=torch.tensor([m["loss_trained"] for _, _, m in inputs]))
    state, _ = ref.server_update(ref.init(_flat(w0), N), cohort)
    torch.testing.assert_close(_flat(arrays.to_numpy_ndarrays()), state.w, rtol=0, atol=0)


def test_a_loss_report_flower_clients_do_not_make_is_refused():
    w0 = [np.zeros(s, dtype=np.float32) for s in SHAPES]
    with pytest.raises(UserError, match="loss_report=batch_sum"):
        FedmooStrategy({"name": "qfedavg", "loss_report": "batch_sum"}, w0, num_clients=N)


class LocalProxy(ClientProxy):
    """An in-process client for Flower's own server loop (no network, no Ray)."""

    def __init__(self, cid, client):
        super().__init__(cid)
        self.client = client.to_client()

    def get_properties(self, ins, timeout, group_id):
        return self.client.get_properties(ins)

    def get_parameters(self, ins, timeout, group_id):
        return self.client.get_parameters(ins)

    def fit(self, ins, timeout, group_id):
        return self.client.fit(ins)

    def evaluate(self, ins, timeout, group_id):
        return self.client.evaluate(ins)

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


@pytest.mark.parametrize("name", ["fedavg", "mgda_prox", "qfedavg"])
def test_flower_server_round_trip(name):
    """flwr.server.Server runs 2 rounds with FedmooClient clients; the result equals fedmoo's
    own loop (same trainers, the algorithm's server_update, prox_mu from client_spec)."""
    if name not in algorithms.names():
        pytest.skip(f"{name} is not registered in this checkout")
    from flwr.server import Server, SimpleClientManager

    torch.manual_seed(0)
    w0 = trainable_arrays(torch.nn.Linear(4, 3))
    strategy = FedmooFitStrategy(name, w0, num_clients=3)
    manager = SimpleClientManager()
    for k, t in enumerate(_make_trainers(3)):
        manager.register(LocalProxy(f"c{k}", FedmooClient(t)))
    history, _ = Server(client_manager=manager, strategy=strategy).fit(num_rounds=2, timeout=None)
    got = _flat(strategy.rule.arrays())

    algo = algorithms.build({"name": name})
    state = algo.init(_flat(w0), num_clients=3)
    trainers = _make_trainers(3)
    for rnd in (1, 2):
        spec = algo.client_spec(state, torch.arange(3))
        arrays = [a.numpy() for a in torch.split(state.w, [12, 3])]
        arrays[0] = arrays[0].reshape(3, 4)
        outs = [t.train(arrays, prox_mu=spec.prox_mu, server_round=rnd) for t in trainers]
        cohort = Cohort(client_ids=torch.arange(3),
                        deltas=state.w - torch.stack([_flat(a) for a, _, _ in outs]),
                        num_samples=torch.tensor([float(n) for _, n, _ in outs]),
                        loss_before=torch.tensor([m["loss_before"] for _, _, m in outs]),
                        loss_after=torch.tensor([m["loss_after"] for _, _, m in outs]),
                        acc_before=torch.tensor([m["acc_before"] for _, _, m in outs]), local_lr=LR)
        state, _ = algo.server_update(state, cohort)
    torch.testing.assert_close(got, state.w, rtol=0, atol=0)
    assert not torch.equal(got, _flat(w0))
    assert [r for r, _ in history.metrics_distributed_fit["server/d_norm"]] == [1, 2]
