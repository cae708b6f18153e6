"""The data contracts between the engine, the algorithms and the runner.

``Cohort`` is what local training of the K sampled clients produces; ``ServerState`` is what an
algorithm carries across rounds (subclassed by algorithms with more state); ``ClientSpec`` is what
an algorithm asks the engine to do on the clients. See docs/architecture.md, "Public Python contract".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class ServerState:
    """Global model ``w`` (flat ``[d]``) and the number of completed rounds.

    Algorithms with state that crosses rounds subclass this dataclass; every field must be a
    tensor, a number, a string, or a dict/list of those, so checkpoints can be saved safely.
    """

    w: Tensor
    round: int = 0


@dataclass
class Cohort:
    """The result of local training of the K clients sampled in one round.

    deltas are pseudo-gradients ``g_k = w_t - w_k`` (descent sign), ``[K, d]``. For per-task
    training (``ClientSpec.task_training``, FMGDA / FSMGDA) they are ``[K, S, d]``: row ``[k, s]``
    is ``(w_t - x_K) / eta_L`` of client k trained on task s alone, zero where
    ``task_mask [K, S]`` is false; ``shared [d]`` marks the coordinates every task uses (the trunk
    of a multi-head model; the rest are the heads). The per-client scalars are then means over
    the client's tasks.

    ``loss_before`` / ``acc_before``: loss and accuracy (%) of ``w_t`` on each client's whole
    training set (None when ``ClientSpec.measure_before`` was false); ``loss_after``: mean loss
    of the last local epoch (measured during training);
    ``loss_trained`` / ``acc_trained``: loss and accuracy of each client's trained model ``w_k``
    on its whole training set, only when ``ClientSpec.eval_trained`` asked for them (else None).
    """

    client_ids: Tensor
    deltas: Tensor
    num_samples: Tensor | None = None
    loss_before: Tensor | None = None
    loss_after: Tensor | None = None
    acc_before: Tensor | None = None
    local_lr: float = 0.01
    personal: Tensor | None = None
    task_mask: Tensor | None = None
    shared: Tensor | None = None
    loss_trained: Tensor | None = None
    acc_trained: Tensor | None = None

    def __post_init__(self) -> None:
        k = self.deltas.shape[0]
        if self.client_ids.shape[0] != k:
            raise ValueError(f"client_ids has {self.client_ids.shape[0]} entries, deltas has {k} rows")
        if self.num_samples is None:
            self.num_samples = torch.ones(k, dtype=self.deltas.dtype, device=self.deltas.device)
        for name in ("num_samples", "loss_before", "loss_after", "acc_before", "loss_trained",
                     "acc_trained"):
            v = getattr(self, name)
            if v is not None and v.shape[0] != k:
                raise ValueError(f"{name} has {v.shape[0]} entries, deltas has {k} rows")

    @property
    def size(self) -> int:
        return int(self.deltas.shape[0])

    def replace(self, **changes: Any) -> "Cohort":
        return dataclasses.replace(self, **changes)

    def require(self, name: str, algo: str) -> Tensor:
        v = getattr(self, name)
        if v is None:
            hint = (" (an algorithm that reads it must not say reads_before = False, which it "
                    "may inherit)") if name in ("loss_before", "acc_before") else ""
            raise ValueError(f"{algo} needs cohort.{name}, which the caller did not provide{hint}")
        return v


@dataclass
class ClientSpec:
    """What the engine must do on the cohort's clients this round.

    - ``prox_mu``: proximal term ``(mu/2)||w - w_t||^2`` in the local objective (FedProx, MGDA-Prox).
    - ``personal`` / ``personal_lam``: personal models ``[K, d]`` trained alongside the global copy
      on the same minibatches, with ``lam (v - w_t)`` added to their gradient (Ditto). The engine
      returns the updated ones in ``Cohort.personal``.
    - ``loss_scale``: per-client factor ``[K]`` multiplying the training loss (loss-scaling attack).
    - ``label_map``: per-client label relabelling ``[K, C]`` (int64): client i trains on, and
      reports ``loss_before`` / ``acc_before`` against, ``label_map[i, y]`` instead of ``y``
      (label-flipping attack); identity rows for honest clients.
    - ``task_training``: train every (client, task) pair the client holds independently from
      ``w_t`` (FMGDA / FSMGDA); the cohort then carries ``[K, S, d]`` deltas (see Cohort).
    - ``eval_trained``: after local training, also evaluate each client's trained model on its
      whole training set (eval mode, the labels ``loss_before`` uses) and report
      ``Cohort.loss_trained`` / ``acc_trained``: the loss a client reports when it measures it
      after training (q-FedAvg ``loss_at: after``, FedFA ``acc_at: after``, AdaFed ``loss:
      trained``). Not available together with ``task_training``.
    - ``loss_report``: how the clients report the losses they measure over their training set
      (``Cohort.loss_before``, ``loss_trained``): ``mean`` (the mean loss) or ``batch_sum``
      (the sum of the per-minibatch mean losses, taken as the mean times the number of local
      minibatches ``ceil(n_k / batch_size)``, as the FedMGDA+ authors' Adult code sums them;
      ``fedmoo.engine.base.as_reported``). ``loss_after`` stays a mean. The attack sees (and
      changes) the reported values.
    - ``measure_before``: measure ``Cohort.loss_before`` / ``acc_before`` (a forward pass of
      ``w_t`` over each client's training set before training). The runner turns it off on
      rounds that write no rounds.csv row when the algorithm does not read them
      (``Algorithm.reads_before``); the cohort then carries None for both. Per-task training
      (``task_training``) measures them always.
    """

    prox_mu: float = 0.0
    personal: Tensor | None = None
    personal_lam: float = 0.0
    loss_scale: Tensor | None = None
    label_map: Tensor | None = None
    task_training: "TaskTraining | None" = None
    eval_trained: bool = False
    measure_before: bool = True
    loss_report: str = "mean"


@dataclass
class GradientProbe:
    """A full-gradient measurement an algorithm asks the run to make on evaluated rounds.

    At ``w_t``, the model the round started from, the run computes the gradient of
    ``sum_s task_weights[s] f_s(w_t)`` over the whole federation, where ``f_s`` is objective s's
    training loss averaged over every client that holds it (each client's mean loss weighted
    uniformly, ``weighting: uniform``, or by its number of training samples, ``samples``), and
    logs its squared norm as ``name``. Single-task data has one objective (``task_weights [1]``).
    FMGDA / FSMGDA use it for the FMOL paper's Pareto-stationarity measure
    ``||lambda_t^T grad F(x_t)||^2``.
    """

    name: str
    task_weights: Tensor
    weighting: str = "uniform"


@dataclass
class TaskTraining:
    """Per-task local training of multi-objective algorithms.

    Client k, for each task s it holds (``tasks [K, S]``, default the federation's objective
    indicator), starts from ``w_t`` and takes ``local_steps`` SGD steps on task s's loss alone:
    full local batch if ``full_batch`` (FMGDA), else minibatches of ``client.batch_size``
    (FSMGDA). The engine reports ``(w_t - x_K) / lr``, the sum of the gradients it used.
    """

    local_steps: int
    full_batch: bool
    tasks: Tensor | None = None


def state_to_dict(state: ServerState) -> dict[str, Any]:
    """Plain dict of a state dataclass (tensors are kept; safe for ``torch.save``)."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


def state_from_dict(template: ServerState, values: dict[str, Any]) -> ServerState:
    """Rebuild a state of the template's class from ``state_to_dict`` output."""
    names = {f.name for f in dataclasses.fields(template)}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"checkpoint state has unknown fields {sorted(unknown)}")
    return dataclasses.replace(template, **values)
