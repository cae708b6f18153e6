"""What the run asks of an engine: the ``Engine`` protocol, its request ``Member`` and the
client's SGD settings ``LocalSGD``.

The run loop (fedmoo.run.loop) and the lockstep groups (fedmoo.run.group) type against these and
nothing else of the engines; both engines (fedmoo.engine.sequential, fedmoo.engine.batched)
implement ``Engine``, and the batched engine also ``StackingEngine``. This module imports no
engine, so a caller can name the interface without building (or importing) one.

``LocalSGD`` lives here, in the engine layer, rather than among the contracts
(fedmoo.state, fedmoo.params): it is what local training is configured with, and only the
code that trains clients reads it (the two engines, their stacked rows, Flower's client
helper, which trains the way the reference engine does); the algorithms see the learning
rate only as ``Cohort.local_lr``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fedmoo.schema import Client, check_knobs, knobs

if TYPE_CHECKING:
    from torch import Tensor

    from fedmoo.state import ClientSpec, Cohort


_CLIENT = Client()   # the declared defaults of the ``client`` knobs
_KINDS = {k.leaf: k.type for k in knobs() if k.key.startswith("client.")}   # float, int


@dataclass(frozen=True)
class LocalSGD:
    """The client's local optimiser, the ``client`` config group as one record: minibatch SGD
    with learning rate ``lr`` for ``epochs`` passes over the client's training samples, or
    exactly ``local_steps`` steps when set; minibatches of ``batch_size`` (None = the whole
    local set, one step per epoch); ``momentum`` and ``weight_decay`` as in
    ``torch.optim.SGD``. The defaults are the schema's (fedmoo.schema.Client: lr 0.01, batch
    10, one epoch, no momentum, no decay); a run's values come from its config
    (``from_config``)."""

    lr: float = _CLIENT.lr
    batch_size: int | None = _CLIENT.batch_size
    epochs: int = _CLIENT.epochs
    local_steps: int | None = _CLIENT.local_steps
    momentum: float = _CLIENT.momentum
    weight_decay: float = _CLIENT.weight_decay

    def __post_init__(self) -> None:
        # the types the engines compute with, whatever numbers the caller gave
        for name, kind in _KINDS.items():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))

    @classmethod
    def from_config(cls, client: Mapping[str, Any]) -> LocalSGD:
        """The record of a ``client`` section, checked as fedmoo.schema checks a run's (a key
        that is no setting, a value out of range: a UserError naming it); a key it lacks has its
        declared default. ``description`` (a config group's one-line help) is not a setting."""
        given = {k: v for k, v in client.items() if k != "description"}
        check_knobs({"client": given})
        return cls(**given)


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

    def train_many(self, members: list[Member], invariant: bool = True) -> list[Cohort]:
        """One round of several runs in one program: a Cohort per member, in order."""
        ...
