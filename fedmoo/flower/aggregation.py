"""fedmoo's server rules on Flower replies, independent of which Flower API carries them.

``ServerRule`` keeps an algorithm's ``ServerState`` and turns one round of client replies
(trained parameter arrays, training samples, reported metrics) into the ``Cohort`` of
docs/architecture.md, then applies the algorithm's own ``server_update``: a Flower deployment
computes exactly the next global model a ``fedmoo run`` would from the same cohort. The arrays
are the model's trainable parameters in ``named_parameters()`` order; fedmoo's flat vector is
their concatenation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedmoo.algorithms import Algorithm, build
from fedmoo.errors import UserError
from fedmoo.state import Cohort

# Metric keys a client reports with its trained parameters (fedmoo.flower.client sends them all).
CLIENT_ID = "client_id"          # fedmoo client index in [0, num_clients): per-client state rows
LOCAL_LR = "lr"                  # the client's local learning rate
# The Cohort's per-client scalars, reported under their field names (the trained model's two
# only when EVAL_TRAINED asks); docs of fedmoo.state.Cohort.
SCALARS = ("loss_before", "loss_after", "acc_before", "loss_trained", "acc_trained")
PROX_MU = "prox_mu"              # config key sent to clients: proximal term of the local objective
EVAL_TRAINED = "eval_trained"    # config key sent to clients: 1 = also report loss/acc_trained
ROUND = "server_round"           # config key sent to clients: the round (seeds their minibatches)


@dataclass
class Reply:
    """One client's answer to a training round, in plain numpy / Python types."""

    arrays: list[np.ndarray]
    num_examples: int
    metrics: dict[str, Any]
    node: str = ""               # the transport's id of the client (used when no client_id metric)


class ServerRule:
    """A fedmoo algorithm and its state, fed with Flower replies one round at a time. ``algo``:
    a slug (default hyperparameters), an ``algo`` config mapping (``{"name": "fedfv",
    "alpha": 0.1}``, as in a run's config) or an instance."""

    def __init__(self, algo: str | dict[str, Any] | Algorithm, initial_arrays: list[np.ndarray],
                 num_clients: int, clients_per_round: int | None = None,
                 local_lr: float | None = None):
        self.algo = algo if isinstance(algo, Algorithm) else \
            build({"name": algo} if isinstance(algo, str) else dict(algo))
        self.num_clients = int(num_clients)
        self.clients_per_round = self.num_clients if clients_per_round is None else int(clients_per_round)
        if not 1 <= self.clients_per_round <= self.num_clients:
            raise UserError(f"clients_per_round={clients_per_round} must be between 1 and "
                            f"num_clients={num_clients}")
        self.algo.check_run(self.num_clients, self.clients_per_round)
        self.shapes = [tuple(a.shape) for a in initial_arrays]
        self.dtypes = [np.asarray(a).dtype for a in initial_arrays]
        self.local_lr = local_lr
        self.state = self.algo.init(self._flat(initial_arrays), num_clients=self.num_clients)
        spec = self.algo.client_spec(self.state, torch.arange(self.clients_per_round))
        if spec.personal is not None:
            raise UserError(
                f"algo={self.algo.name} keeps a personal model per client on the server "
                "(ClientSpec.personal), which the Flower strategy does not ship to clients; "
                "use a rule whose clients need only the global model"
            )
        if spec.loss_report != "mean":
            raise UserError(
                f"algo={self.algo.name} asks the clients for loss_report={spec.loss_report}, "
                "which Flower's clients do not report (they report mean losses); use "
                "loss_report=mean"
            )
        self._node_index: dict[str, int] = {}

    # -- arrays <-> fedmoo's flat vector ------------------------------------------------------
    def _flat(self, arrays: list[np.ndarray]) -> torch.Tensor:
        shapes = [tuple(np.shape(a)) for a in arrays]
        if shapes != self.shapes:
            raise ValueError(f"a client returned arrays of shapes {shapes}; the global model has "
                             f"{self.shapes}")
        return torch.cat([torch.as_tensor(np.asarray(a, dtype=np.float32)).reshape(-1)
                          for a in arrays])

    def arrays(self) -> list[np.ndarray]:
        """The global model as arrays shaped and typed like the initial ones."""
        flat = self.state.w.detach().cpu().numpy()
        ends = np.cumsum([int(np.prod(shape, dtype=np.int64)) for shape in self.shapes])
        return [part.reshape(shape).astype(dtype, copy=True) for part, shape, dtype
                in zip(np.split(flat, ends[:-1]), self.shapes, self.dtypes)]

    # -- the round ----------------------------------------------------------------------------
    def client_config(self) -> dict[str, float]:
        """What the clients must know about their local objective this round."""
        spec = self.algo.client_spec(self.state, torch.arange(self.clients_per_round))
        return {PROX_MU: float(spec.prox_mu), EVAL_TRAINED: float(spec.eval_trained)}

    def _client_index(self, reply: Reply) -> int:
        if CLIENT_ID in reply.metrics:
            k = int(reply.metrics[CLIENT_ID])
        else:
            k = self._node_index.setdefault(reply.node, len(self._node_index))
        if not 0 <= k < self.num_clients:
            raise ValueError(f"client {reply.node or '?'} has index {k}, outside [0, "
                             f"{self.num_clients}); report {CLIENT_ID!r} in [0, num_clients)")
        return k

    def cohort(self, replies: list[Reply]):
        """The Cohort of this round, clients sorted by index as fedmoo's sampler orders them."""
        indexed = sorted(((self._client_index(r), r) for r in replies), key=lambda t: t[0])
        ids = [k for k, _ in indexed]
        if len(set(ids)) != len(ids):
            raise ValueError(f"two replies carry the same client index ({ids})")
        replies = [r for _, r in indexed]
        w = self.state.w
        local = torch.stack([self._flat(r.arrays).to(w) for r in replies])
        dt = w.dtype

        def scalar(key: str) -> torch.Tensor | None:
            if not all(key in r.metrics for r in replies):
                return None
            return torch.tensor([float(r.metrics[key]) for r in replies], dtype=dt)

        lrs = {float(r.metrics[LOCAL_LR]) for r in replies if LOCAL_LR in r.metrics}
        if len(lrs) > 1:
            raise ValueError(f"clients report different learning rates {sorted(lrs)}")
        lr = lrs.pop() if lrs else self.local_lr
        if lr is None:
            raise ValueError(f"clients report no {LOCAL_LR!r} metric; pass local_lr= to the strategy")
        return Cohort(
            client_ids=torch.tensor(ids, dtype=torch.long),
            deltas=w.unsqueeze(0) - local,
            num_samples=torch.tensor([float(r.num_examples) for r in replies], dtype=dt),
            local_lr=float(lr), **{key: scalar(key) for key in SCALARS},
        )

    def aggregate(self, replies: list[Reply]) -> tuple[list[np.ndarray], dict[str, float]]:
        """Apply the server rule to one round of replies; returns the new global arrays and the
        algorithm's diagnostics (plus ``train/loss_mean`` when clients report ``loss_before``)."""
        cohort = self.cohort(replies)
        try:
            self.state, diag = self.algo.server_update(self.state, cohort)
        except ValueError as e:
            if "needs cohort." in str(e):
                raise ValueError(f"{e}: the clients must report it in their fit metrics "
                                 "(fedmoo.flower.client does)") from None
            raise
        if not bool(torch.isfinite(self.state.w).all()):
            raise ValueError(f"{self.algo.name} produced a non-finite global model in round "
                             f"{self.state.round}; lower the clients' lr or the server step")
        if cohort.loss_before is not None:
            diag["train/loss_mean"] = float(cohort.loss_before.mean())
        return self.arrays(), diag
