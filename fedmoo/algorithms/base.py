"""Base class of every server rule. Algorithms are pure: ``server_update`` returns a new state."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from torch import Tensor

from fedmoo.config import hparams as declarations
from fedmoo.moo.descent import common_descent, move_norm, update_norms
from fedmoo.state import ClientSpec, Cohort, GradientProbe, ServerState


class Algorithm:
    """A federated server rule, declared in ``fedmoo.config.hparams.algo`` (a plugin's beside
    its code); ``name`` is the slug it was built under (a preset has its own:
    ``fedmgda_plus``), ``hp`` the declared dataclass of its checked hyperparameters."""

    name: ClassVar[str] = ""
    state_cls: ClassVar[type[ServerState]] = ServerState
    # Model-sized vectors the state keeps besides w: (per client, in total); a run's memory
    # estimate counts them before anything is allocated (fedmoo.run.setup).
    kept_vectors: ClassVar[tuple[int, int]] = (0, 0)

    hp: Any          # the declared dataclass, filled: a rule annotates its own (``hp: FedFV``)

    # -- construction -------------------------------------------------------------------------
    def __init__(self, name: str | None = None, rounds: int | None = None,
                 **hyperparameters: Any):
        self.name = name or type(self).name    # type: ignore[misc]
        self.rounds = rounds       # the run's length, from the runner (FedMGDA's step decay)
        self.hp = declarations.make("algo", self.name, hyperparameters)

    def hparams(self) -> dict[str, Any]:
        """The declared hyperparameters' values (for repr, summary.json and tables)."""
        return declarations.values(self.hp)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hparams().items())
        return f"{self.name}({args})"

    def check_run(self, num_clients: int, clients_per_round: int) -> None:
        """Reject run settings the algorithm cannot work with (raise UserError)."""

    # -- the round ----------------------------------------------------------------------------
    def init(self, w0: Tensor, num_clients: int) -> ServerState:
        return self.state_cls(w=w0.detach().clone(), round=0)

    def client_spec(self, state: ServerState, client_ids: Tensor) -> ClientSpec:
        return ClientSpec()

    @property
    def reads_before(self) -> bool:
        """Whether ``step`` reads ``cohort.loss_before`` / ``acc_before`` (a forward pass of w_t over
        each client's training set). False lets the runner skip that pass on rounds that write no
        rounds.csv row; ``cohort.require`` then fails loudly instead of using a stale value."""
        return True

    def server_update(self, state: ServerState, cohort: Cohort,
                      diagnose: bool = True) -> tuple[ServerState, dict[str, float]]:
        """Apply one round: the new state (round + 1) and diagnostics, among them every rule's
        ``server/d_norm`` (``||d||``, 0 below the updates' rounding level), ``server/min_cos`` and
        ``server/harmed`` (the move against the cohort's updates, fedmoo.moo.descent);
        ``diagnose=False`` leaves those three out (a round that writes no row)."""
        direction, step, changes, diag = self.step(state, cohort)
        new = dataclasses.replace(state, w=state.w - step * direction, round=state.round + 1,
                                  **changes)
        if not diagnose:
            return new, diag
        # the updates' norms and rounding level, once for both diagnostics
        norms, noise = update_norms(cohort.deltas, cohort.task_mask)
        min_cos, harmed = common_descent(cohort.deltas, direction * float(step), cohort.task_mask,
                                         noise=noise, norms=norms)
        diag = {"server/d_norm": move_norm(cohort.deltas, direction, noise=noise),
                "server/min_cos": min_cos, "server/harmed": float(harmed), **diag}
        return new, diag

    def step(
        self, state: ServerState, cohort: Cohort
    ) -> tuple[Tensor, float, dict[str, Any], dict[str, float]]:
        """Return (direction d, step size eta, state field changes, diagnostics)."""
        raise NotImplementedError

    # -- evaluation ---------------------------------------------------------------------------
    def eval_params(self, state: ServerState) -> Tensor:
        """Parameters evaluated for the reported ``test/...`` metrics: ``[d]`` or per client ``[N, d]``."""
        return state.w

    def extra_eval_params(self, state: ServerState) -> dict[str, Tensor]:
        """Further models to evaluate, logged under ``<prefix>/...`` (e.g. Ditto's ``global``)."""
        return {}

    def gradient_probe(self, state: ServerState) -> GradientProbe | None:
        """A full-gradient measurement to log on evaluated rounds, at the model the last round started
        from; None = none (FMGDA / FSMGDA: ``||lambda_t^T grad F(x_t)||^2``)."""
        return None


def mixing_weights(cohort: Cohort, weighting: str) -> Tensor:
    """FedAvg weights p_k: ``samples`` (n_k / sum n) or ``uniform`` (1/K)."""
    if weighting == "uniform":
        return torch.full((cohort.size,), 1.0 / cohort.size, dtype=cohort.deltas.dtype,
                          device=cohort.deltas.device)
    n = cohort.num_samples.to(cohort.deltas.dtype)
    return n / n.sum()
