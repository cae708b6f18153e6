"""The data contracts between the engine, the algorithms and the runner: ``Cohort`` (what local
training produces), ``ServerState`` (what an algorithm carries across rounds) and ``ClientSpec``
(what it asks the engine to do); docs/architecture.md, "Public Python contract"."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class ServerState:
    """Global model ``w`` (flat ``[d]``) and the number of completed rounds; an algorithm with more
    state subclasses it with tensor, number, string or dict/list fields (saved in checkpoints)."""

    w: Tensor
    round: int = 0


@dataclass
class Cohort:
    """The result of local training of the K clients sampled in one round.

    ``deltas``: pseudo-gradients ``g_k = w_t - w_k`` (descent sign), ``[K, d]``; with per-task
    training (``ClientSpec.task_training``) ``[K, S, d]``, row ``[k, s]`` being
    ``(w_t - x_K) / eta_L`` of client k trained on task s alone (zero where ``task_mask [K, S]`` is
    false), ``shared [d]`` the coordinates every task uses (the trunk) and the per-client scalars
    means over the client's tasks. ``loss_before`` / ``acc_before``: loss and accuracy (%) of
    ``w_t`` on each client's training set (None unless ``ClientSpec.measure_before``);
    ``loss_after``: mean loss of the last local epoch; ``loss_trained`` / ``acc_trained``: those of
    the trained model, when ``ClientSpec.eval_trained`` asks.
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
        if self.num_samples is None:
            self.num_samples = torch.ones(k, dtype=self.deltas.dtype, device=self.deltas.device)
        for name in ("client_ids", "num_samples", "loss_before", "loss_after", "acc_before",
                     "loss_trained", "acc_trained"):
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
    - ``personal`` / ``personal_lam``: personal models ``[K, d]`` trained on the same minibatches,
      with ``lam (v - w_t)`` added to their gradient (Ditto); returned in ``Cohort.personal``.
    - ``loss_scale``: per-client factor ``[K]`` on the training loss (loss-scaling attack).
    - ``label_map``: per-client relabelling ``[K, C]`` (int64) of the labels a client trains on and
      reports ``loss_before`` / ``acc_before`` against (label flipping); identity rows if honest.
    - ``task_training``: train every (client, task) pair independently from ``w_t`` (FMGDA /
      FSMGDA); the cohort then carries ``[K, S, d]`` deltas.
    - ``eval_trained``: also report ``Cohort.loss_trained`` / ``acc_trained`` of each trained model
      on its training set (not with ``task_training``).
    - ``loss_report``: ``mean`` or ``batch_sum`` (the mean times ``ceil(n_k / batch_size)``, the
      FedMGDA+ authors' Adult code; ``fedmoo.engine.base.as_reported``) for the losses measured over
      the training set; ``loss_after`` stays a mean, and an attack sees the reported values.
    - ``measure_before``: measure ``loss_before`` / ``acc_before`` (a forward pass of ``w_t``); the
      runner turns it off on rounds that write no rounds.csv row when the algorithm does not read
      them (``Algorithm.reads_before``). Per-task training measures them always.
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

    At ``w_t`` the run takes the gradient of ``sum_s task_weights[s] f_s(w_t)`` over the whole
    federation, ``f_s`` objective s's training loss averaged over the clients holding it
    (``weighting``: uniform or by training samples), and logs its squared norm as ``name``.
    """

    name: str
    task_weights: Tensor
    weighting: str = "uniform"


@dataclass
class TaskTraining:
    """Per-task local training: client k, for each task s it holds (``tasks [K, S]``, default the
    objective indicator), takes ``local_steps`` SGD steps from ``w_t`` on task s's loss alone, full
    batch or minibatches of ``client.batch_size``, and reports ``(w_t - x_K) / lr``."""

    local_steps: int
    full_batch: bool
    tasks: Tensor | None = None


def state_to_dict(state: ServerState) -> dict[str, Any]:
    """Plain dict of a state dataclass (tensors are kept; safe for ``torch.save``)."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
