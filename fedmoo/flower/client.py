"""The client side of a Flower deployment of a fedmoo rule: local SGD in plain PyTorch.

``LocalTrainer`` trains one client's copy of the received global model as fedmoo's reference
engine does (same minibatches from the same seed, same proximal term) and reports the scalars
``fedmoo.flower.aggregation`` turns into fedmoo's Cohort: ``loss_before`` / ``acc_before`` of
the received model, ``loss_after`` of the last local epoch, the learning rate, the client index
and, when the round's config asks (``eval_trained``), ``loss_trained`` / ``acc_trained``.
``FedmooClient`` wraps a trainer as a ``flwr.client.NumPyClient``; ``client_app(make_trainer)``
builds a Message-API ``ClientApp`` from a factory ``make_trainer(context) -> LocalTrainer``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from torch import Tensor, nn

from fedmoo.engine.base import LocalSGD
from fedmoo.engine.common import (client_batches, forward_stats, param_views, round_seed,
                                  sample_losses)
from fedmoo.engine.sequential import SGD, last_epoch_loss, sgd_step
from fedmoo.flower.aggregation import CLIENT_ID, EVAL_TRAINED, LOCAL_LR, PROX_MU, ROUND
from fedmoo.params import set_flat


def trainable_arrays(model: nn.Module) -> list[np.ndarray]:
    """The model's trainable parameters as numpy arrays (the arrays the strategy exchanges)."""
    return [p.detach().cpu().numpy().copy() for p in model.parameters() if p.requires_grad]


class LocalTrainer:
    """One client's training samples ``x``/``y``, evaluation samples ``x_test``/``y_test``, ``task``
    (``classification`` or ``regression``) and local optimiser settings ``sgd`` (a ``LocalSGD``,
    e.g. ``LocalSGD(lr=0.05, batch_size=10)`` or ``LocalSGD.from_config`` of a config's ``client``)."""

    def __init__(self, model: nn.Module, client_id: int, x: Tensor, y: Tensor,
                 x_test: Tensor | None = None, y_test: Tensor | None = None, *, sgd: LocalSGD,
                 task: str = "classification", seed: int = 0):
        self.model, self.client_id = model, int(client_id)
        self.x, self.y, self.x_test, self.y_test = x, y, x_test, y_test
        self.sgd, self.task, self.seed = sgd, task, int(seed)

    def _flat(self, arrays: list[np.ndarray]) -> Tensor:
        p = next(self.model.parameters())
        return torch.cat([torch.as_tensor(np.asarray(a)).reshape(-1) for a in arrays]).to(p)

    def train(self, arrays: list[np.ndarray], prox_mu: float = 0.0, server_round: int = 0,
              generator_seed: int | None = None,
              eval_trained: bool = False) -> tuple[list[np.ndarray], int, dict[str, float]]:
        """Local training from the global ``arrays``; returns (new arrays, n, metrics).
        ``eval_trained``: also report the trained model's loss and accuracy on the local
        training set (the rule's ``ClientSpec.eval_trained``)."""
        model, x, y, sgd = self.model, self.x, self.y, self.sgd
        w = self._flat(arrays)
        set_flat(model, w)
        idx = torch.arange(y.shape[0], device=y.device)
        lb, cb = forward_stats(model, x, y, idx, self.task)
        seed = round_seed(self.seed, server_round, self.client_id) if generator_seed is None \
            else generator_seed
        gen = torch.Generator().manual_seed(seed)
        anchor = param_views(model, w)
        opt = SGD(model.parameters(), sgd.lr, sgd.momentum, sgd.weight_decay)

        def step(b: Tensor) -> float:
            loss = sample_losses(model(x[b]), y[b], self.task).mean()
            return float(sgd_step(opt, loss, anchor, prox_mu))

        model.train()
        batches = client_batches(idx.numel(), sgd.batch_size, sgd.epochs, sgd.local_steps, gen)
        metrics = {CLIENT_ID: self.client_id, "loss_before": float(lb.mean()),
                   "loss_after": last_epoch_loss(idx, batches, step),
                   "acc_before": 100.0 * float(cb.mean()), LOCAL_LR: sgd.lr}
        if eval_trained:
            la, ca = forward_stats(model, x, y, idx, self.task)
            metrics.update(loss_trained=float(la.mean()), acc_trained=100.0 * float(ca.mean()))
        return trainable_arrays(model), int(idx.numel()), metrics

    def evaluate(self, arrays: list[np.ndarray]) -> tuple[float, int, dict[str, float]]:
        """(mean loss, number of samples, {"accuracy": %}) of ``arrays`` on the test samples."""
        x, y = (self.x, self.y) if self.x_test is None else (self.x_test, self.y_test)
        set_flat(self.model, self._flat(arrays))
        losses, correct = forward_stats(self.model, x, y, torch.arange(y.shape[0],
                                                                       device=y.device), self.task)
        n = int(y.shape[0])
        if n == 0:
            return 0.0, 0, {"accuracy": 0.0}
        return float(losses.mean()), n, {"accuracy": 100.0 * float(correct.mean())}


def _round_config(config) -> dict:
    """The ``train`` keywords from a round's config (prox_mu, the round, eval_trained; Flower's
    Message API also sends server-round)."""
    return {"prox_mu": float(config.get(PROX_MU, 0.0)),
            "server_round": int(config.get(ROUND, config.get("server-round", 0))),
            "eval_trained": bool(config.get(EVAL_TRAINED, 0.0))}


class FedmooClient(NumPyClient):
    """A ``flwr.client.NumPyClient`` around a trainer (``.to_client()`` gives a Flower Client)."""

    def __init__(self, trainer: LocalTrainer):
        self.trainer = trainer

    def get_parameters(self, config):
        return trainable_arrays(self.trainer.model)

    def fit(self, parameters, config):
        return self.trainer.train(parameters, **_round_config(config))

    def evaluate(self, parameters, config):
        return self.trainer.evaluate(parameters)


def client_app(make_trainer: Callable[[Context], LocalTrainer]) -> ClientApp:
    """A Message-API ``ClientApp``; ``make_trainer(context)`` gives the node's trainer (e.g.
    from ``context.node_config["partition-id"]``) and is called once per node."""
    app = ClientApp()
    trainers: dict[int, LocalTrainer] = {}

    def trainer_of(context: Context) -> LocalTrainer:
        if context.node_id not in trainers:
            trainers[context.node_id] = make_trainer(context)
        return trainers[context.node_id]

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        trainer = trainer_of(context)
        arrays = next(iter(msg.content.array_records.values())).to_numpy_ndarrays()
        new, n, metrics = trainer.train(
            arrays, **_round_config(next(iter(msg.content.config_records.values()), {})))
        content = RecordDict({"arrays": ArrayRecord(new),
                              "metrics": MetricRecord({**metrics, "num-examples": n})})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        arrays = next(iter(msg.content.array_records.values())).to_numpy_ndarrays()
        loss, n, extra = trainer_of(context).evaluate(arrays)
        content = RecordDict({"metrics": MetricRecord({"loss": loss, **extra, "num-examples": n})})
        return Message(content=content, reply_to=msg)

    return app
