"""The metrics row of an evaluated round, clients_rounds.csv blocks and clients.csv rows.

Column names are the report layer's (``fedmoo.report.metrics``); the numbers come from the
engine's per-client evaluation (``fedmoo.engine.evaluate``). A client without samples on the
split is missing (``_evaluate``): NaN in every file, left out of the statistics, counted.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
from torch import Tensor, nn

from fedmoo.data.federated import FederatedData
from fedmoo.engine.evaluate import (ClientEval, evaluate_clients, improved_fraction,
                                    objective_gradient)
from fedmoo.engine.cpu_layout import fast_layout, step_chunk
from fedmoo.report.metrics import accuracy_metrics, group_metrics, rounds_to_threshold, task_metrics

log = logging.getLogger(__name__)


class RoundEvaluator:
    """Evaluates the model an algorithm reports (``algo.eval_params``) the way the config asks:
    on ``eval_split``, per attack group, per extra model of the algorithm, per task.

    On multi-task data (FMOL) also the global model's per-task training loss on every client
    (the FMGDA paper's objective), normalised by the initial model's (``train/task{s}_loss_norm``);
    ``summary`` gives the rounds until each task's (and every task's) training loss is below
    ``loss_threshold`` (the paper's Table 2)."""

    def __init__(self, cfg: dict[str, Any], algo, model: nn.Module, federation: FederatedData,
                 groups: dict[str, np.ndarray], w0: Tensor):
        self.chunk = None               # samples per forward pass (None: eval_chunk)
        self.tasks = bool(federation.num_tasks)
        if self.tasks:                  # per-task evaluation: conv nets channels-last on a CPU
            model, self.chunk = fast_layout(model, federation.x), step_chunk(federation.x)
            self.regression = federation.task == "multitask_regression"
            self.threshold = float(cfg["loss_threshold"])
            self.task_mask = (None if federation.task_mask is None
                              else federation.task_mask.cpu().numpy())
            ev = evaluate_clients(model, federation, "train", w0, chunk=self.chunk)
            held = np.ones(ev.loss.shape, bool) if self.task_mask is None else self.task_mask
            held = held & (ev.count > 0)[:, None]
            self.reference = np.array([ev.loss[held[:, t], t].mean() if held[:, t].any()
                                       else np.nan for t in range(ev.loss.shape[1])])
        self.algo, self.model, self.data, self.groups = algo, model, federation, groups or {}
        self.split = cfg["eval_split"]
        self.track_improved = cfg["track_improved"]
        self.last: tuple[int, ClientEval] | None = None   # (round, evaluation) of the last row
        empty = int((federation.split(self.split).sizes == 0).sum())
        if empty:
            log.warning("%d of %d clients have no %s samples: they are reported as missing "
                         "(NaN), left out of the %s metrics and counted in %s/clients_missing",
                         empty, federation.num_clients, self.split, self.split, self.split)

    def _evaluate(self, split: str, params: Tensor) -> ClientEval:
        """Clients without samples on ``split``: NaN accuracy and loss (missing, not 0 %)."""
        ev = evaluate_clients(self.model, self.data, split, params, chunk=self.chunk)
        mask = (np.asarray(ev.count) == 0).reshape(-1, *([1] * (np.ndim(ev.acc) - 1)))
        return dataclasses.replace(ev, acc=np.where(mask, np.nan, ev.acc),
                                   loss=np.where(mask, np.nan, ev.loss))

    def _metrics(self, ev: ClientEval, prefix: str, normalise: bool = False) -> dict[str, float]:
        if self.tasks:     # multi-task data: per-task columns
            return task_metrics(ev.loss, ev.acc, ev.count, self.task_mask, prefix, self.regression,
                                self.reference if normalise else None)
        return accuracy_metrics(ev.acc, ev.correct, ev.count, ev.loss, prefix=prefix)

    def row(self, done: int, state, ids: Tensor, trained, cohort,
            diag: dict[str, float], w_start: Tensor) -> dict[str, Any]:
        """The rounds.csv row of round ``done`` (without its time columns). ``w_start``: the
        global model the round started from, where an algorithm's ``gradient_probe`` (e.g.
        FMGDA's stationarity measure) is measured."""
        params = self.algo.eval_params(state)
        ev = self._evaluate(self.split, params)
        row: dict[str, Any] = {"round": done, **self._metrics(ev, self.split)}
        if not self.tasks:
            for name, mask in self.groups.items():  # e.g. benign / attackers (attack.groups)
                row.update(group_metrics(ev.acc, ev.correct, ev.count, ev.loss, mask, prefix=name))
        for name, extra in self.algo.extra_eval_params(state).items():
            row.update(self._metrics(self._evaluate(self.split, extra), name))
        if self.tasks:
            ev_train = evaluate_clients(self.model, self.data, "train", params, chunk=self.chunk)
            train = self._metrics(ev_train, "train", normalise=True)
            train.pop("train/loss_mean")     # that column is the cohort's loss before training
            row.update(train)
        row["train/loss_mean"] = float(cohort.loss_before.mean())
        if self.track_improved and not self.tasks:  # measured, not reported, losses
            row["round/improved_frac"] = improved_fraction(
                self.model, self.data, state.w, ids, trained.loss_before)
        probe = self.algo.gradient_probe(state)
        if probe is not None:
            grad = objective_gradient(self.model, self.data, w_start, probe.task_weights,
                                      probe.weighting)
            row[probe.name] = float(grad.double().square().sum())
        row.update(diag)
        self.last = (done, ev)
        return row

    def _latest(self, done: int, params: Tensor) -> ClientEval:
        """The evaluation of round ``done``'s row when it made one, else a new one."""
        if self.last is not None and self.last[0] == done:
            return self.last[1]
        return self._evaluate(self.split, params)

    def log_clients(self, writer, done: int, state) -> None:
        """One clients_rounds.csv block."""
        params = self.algo.eval_params(state)
        test = self._latest(done, params)
        writer.log(done, test.acc, test.loss, self._evaluate("train", params).loss)

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, float]:
        return (rounds_to_threshold(rows, self.data.num_tasks, self.threshold)
                if self.tasks else {})

    def clients_rows(self, state, done: int) -> list[dict[str, Any]]:
        """clients.csv after round ``done``: each client's sizes, accuracy and loss (per task on
        multi-task data)."""
        ev = self._latest(done, self.algo.eval_params(state))
        fed = self.data
        tr = fed.train.sizes.cpu().numpy()
        te = fed.split(self.split).sizes.cpu().numpy()
        names = fed.client_names
        tasks = range(ev.loss.shape[1]) if ev.loss.ndim > 1 else ()   # accuracy, loss: their means
        return [
            {"client": k, **({"name": names[k]} if names else {}), "num_train": int(tr[k]),
             f"num_{self.split}": int(te[k]), "accuracy": float(np.mean(ev.acc[k])),
             "loss": float(np.mean(ev.loss[k])),
             **{f"task{t}_{name}": float(v[k, t]) for t in tasks
                for name, v in (("accuracy", ev.acc), ("loss", ev.loss))}}
            for k in range(fed.num_clients)
        ]
