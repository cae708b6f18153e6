"""Which clients train in a round."""

from __future__ import annotations

import numpy as np
import torch

from fedmoo.errors import UserError

class ClientSampler:
    """Sampling without replacement from ``numpy.random.default_rng([seed, t, 7])`` in round
    t, so any round can be replayed: ``uniform``, or ``weighted`` (q-FFL's and FedFV's "with
    prob. p_k", p proportional to the clients' training ``sizes``, drawn successively).
    ``forced`` clients (``attack.always_participate``) are in every cohort, the other places
    drawn from the other clients. The cohort is returned sorted."""

    def __init__(self, num_clients: int, per_round: int, seed: int, forced=(),
                 scheme: str = "uniform", sizes=None):
        self.n, self.k, self.seed = num_clients, per_round, seed
        self.forced = np.asarray(forced, dtype=np.int64).reshape(-1)
        if self.forced.size > per_round:
            raise UserError(f"{self.forced.size} clients must join every round "
                            f"(attack.always_participate=true) but clients_per_round={per_round}; "
                            f"set clients_per_round>={self.forced.size} or null")
        self.rest = np.setdiff1d(np.arange(num_clients), self.forced)
        self.p = None
        if scheme == "weighted" and per_round < num_clients:
            n = np.asarray(sizes, dtype=np.float64).reshape(-1)[self.rest]
            if n.size != self.rest.size or np.count_nonzero(n > 0) < per_round - self.forced.size:
                raise UserError(f"sampling=weighted cannot draw {per_round - self.forced.size} "
                                f"clients: only {np.count_nonzero(n > 0)} have training samples; "
                                "lower clients_per_round or use sampling=uniform")
            self.p = n / n.sum()

    def sample(self, round_idx: int) -> torch.Tensor:
        if self.k >= self.n:     # (the same ids as a draw; without it FedFV's Table 3 lockstep
            return torch.arange(self.n)   # sweep peaked 150-200 MB higher, measured 2026-11-29)
        rng = np.random.default_rng([self.seed, round_idx, 7])
        if not self.forced.size and self.p is None:      # (the draws of earlier versions)
            return torch.from_numpy(np.sort(rng.choice(self.n, self.k, replace=False))).long()
        picks = rng.choice(self.rest, self.k - self.forced.size, replace=False, p=self.p)
        return torch.from_numpy(np.sort(np.concatenate([self.forced, picks]))).long()
