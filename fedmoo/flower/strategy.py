"""Every fedmoo server rule as a Flower strategy: two adapters over one ``ServerRule``.

``FedmooStrategy`` serves Flower's Message API (``ServerApp`` + ``strategy.start(grid, ...)``),
``FedmooFitStrategy`` the ``flwr.server.strategy.Strategy`` API (``aggregate_fit`` with
``FitRes``). Both sample ``clients_per_round`` of ``num_clients`` nodes a round, send the rule's
client configuration (``prox_mu``, the round) with the global model, and replace Flower's
averaging by the algorithm's ``server_update`` on the cohort built from the replies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import (
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as FitFedAvg
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as MessageFedAvg

from fedmoo.algorithms import Algorithm
from fedmoo.flower.aggregation import ROUND, Reply, ServerRule


def _sampling(rule: ServerRule, kwargs: dict[str, Any], fraction: str, nodes: str,
              available: str) -> dict[str, Any]:
    """``kwargs`` for Flower's FedAvg, which samples ``rule.clients_per_round`` of
    ``rule.num_clients`` nodes a round (its keywords are named differently in each API) and
    evaluates none unless told."""
    k, n = rule.clients_per_round, rule.num_clients
    return {fraction: k / n, nodes: k, available: n, "fraction_evaluate": 0.0, **kwargs}


class FedmooStrategy(MessageFedAvg):
    """A fedmoo algorithm as a Message-API Flower strategy: ``algo`` as ``ServerRule`` takes it,
    ``initial_arrays`` the model's ``trainable_arrays``; further keywords go to Flower's FedAvg.
    Start it with ``strategy.start(grid, strategy.initial_record(), num_rounds=...)``."""

    def __init__(self, algo: str | dict[str, Any] | Algorithm, initial_arrays: list[np.ndarray],
                 num_clients: int, clients_per_round: int | None = None,
                 local_lr: float | None = None, **kwargs: Any):
        self.rule = ServerRule(algo, initial_arrays, num_clients, clients_per_round, local_lr)
        super().__init__(**_sampling(self.rule, kwargs, "fraction_train", "min_train_nodes",
                                     "min_available_nodes"))

    def initial_record(self) -> ArrayRecord:
        return ArrayRecord(self.rule.arrays())

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        config = ConfigRecord({**dict(config), **self.rule.client_config(), ROUND: server_round})
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        valid, _ = self._check_and_log_replies(replies, is_train=True)
        if not valid:
            return None, None
        batch = []
        for msg in valid:
            metrics = dict(next(iter(msg.content.metric_records.values())))
            arrays = next(iter(msg.content.array_records.values())).to_numpy_ndarrays()
            batch.append(Reply(arrays, int(metrics[self.weighted_by_key]), metrics,
                               str(msg.metadata.src_node_id)))
        new, diag = self.rule.aggregate(batch)
        return ArrayRecord(new), MetricRecord(diag)


class FedmooFitStrategy(FitFedAvg):
    """A fedmoo algorithm as a ``flwr.server.strategy`` strategy (``aggregate_fit``/``FitRes``).

    Same arguments as ``FedmooStrategy``; further keywords go to ``flwr.server.strategy.FedAvg``.
    """

    def __init__(self, algo: str | dict[str, Any] | Algorithm, initial_arrays: list[np.ndarray],
                 num_clients: int, clients_per_round: int | None = None,
                 local_lr: float | None = None, **kwargs: Any):
        self.rule = ServerRule(algo, initial_arrays, num_clients, clients_per_round, local_lr)
        kwargs.setdefault("initial_parameters", ndarrays_to_parameters(self.rule.arrays()))
        super().__init__(**_sampling(self.rule, kwargs, "fraction_fit", "min_fit_clients",
                                     "min_available_clients"))

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        extra = {**self.rule.client_config(), ROUND: server_round}
        return [(proxy, FitIns(ins.parameters, {**ins.config, **extra}))
                for proxy, ins in super().configure_fit(server_round, parameters, client_manager)]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[tuple[ClientProxy, FitRes] | BaseException]
                      ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if not results or (failures and not self.accept_failures):
            return None, {}
        batch = [Reply(parameters_to_ndarrays(res.parameters), int(res.num_examples),
                       dict(res.metrics), str(proxy.cid)) for proxy, res in results]
        new, diag = self.rule.aggregate(batch)
        return ndarrays_to_parameters(new), diag
