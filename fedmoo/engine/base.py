"""What the run asks of an engine: the ``Engine`` protocol, its request ``Member`` and the
client's SGD settings ``LocalSGD``. The run loop and the lockstep groups (fedmoo.run.group) type
against these alone; this module imports no engine, so naming the interface builds none."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fedmoo.config.schema import Client

if TYPE_CHECKING:
    from torch import Tensor

    from fedmoo.state import ClientSpec, Cohort


# The client's local optimiser: the schema's ``client`` record, a run's from
# ``LocalSGD.from_config(cfg["client"])``.
LocalSGD = Client


@dataclass
class Member:
    """One run's request for a round: its engine, cohort ``ids``, global model ``w`` [d], the
    algorithm's client spec and the round's seed."""

    engine: Engine
    ids: Tensor
    w: Tensor
    spec: ClientSpec
    seed: int


@runtime_checkable
class Engine(Protocol):
    """Local training of a round's cohort: what the run loop and the lockstep groups may use
    of any engine."""

    sgd: LocalSGD
    """The client's SGD settings every cohort trains with."""

    choice: str | None
    """Why ``engine=auto`` chose this engine (summary.json's engine_choice); None if named."""

    @property
    def name(self) -> str:
        """The engine (and its program) in words, as summary.json records it."""
        ...

    def train(self, client_ids: Tensor, w: Tensor, spec: ClientSpec, seed: int) -> Cohort:
        """One round: the clients ``client_ids`` train from ``w`` as ``spec`` asks (seeded)."""
        ...


@runtime_checkable
class StackingEngine(Engine, Protocol):
    """An engine that trains several runs' cohorts in one program (the batched engine); the
    runs of a sweep are grouped (fedmoo.run.group) only on such an engine."""

    compiled: bool
    """Whether its step runs through torch.compile (then its runs are not grouped)."""

    def train_many(self, members: list[Member]) -> list[Cohort]:
        """One round of several runs in one program: a Cohort per member, in order, each
        member's numbers those of its run alone."""
        ...


def as_reported(cohort: Cohort, spec: ClientSpec, sgd: LocalSGD) -> Cohort:
    """The cohort as the clients report it, ``spec.loss_report`` applied: with ``batch_sum`` each
    loss measured over a client's training set (``loss_before``, ``loss_trained``) becomes the
    sum of its per-minibatch mean losses, ``mean x ceil(n_k / batch_size)`` (one minibatch when
    ``batch_size`` is None); ``loss_after`` (measured during training) stays a mean. With
    ``mean`` the cohort is returned as is."""
    if spec.loss_report == "mean":
        return cohort
    if spec.loss_report != "batch_sum":
        raise ValueError(f"ClientSpec.loss_report={spec.loss_report!r}: mean | batch_sum")
    size = sgd.batch_size or math.inf
    batches = (cohort.num_samples.double() / size).ceil().clamp(min=1.0)
    changes = {}
    for name in ("loss_before", "loss_trained"):
        v = getattr(cohort, name)
        if v is not None:
            changes[name] = (v.double() * batches.to(v.device)).to(v.dtype)
    return cohort.replace(**changes)
