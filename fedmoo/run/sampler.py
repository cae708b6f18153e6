"""Which clients train in a round."""

from __future__ import annotations

import numpy as np
import torch

from fedmoo.errors import UserError


class ClientSampler:
    """Uniform sampling without replacement, seeded per round so any round can be replayed.

    ``forced`` clients (e.g. attackers with ``attack.always_participate``) are in every cohort;
    the remaining ``per_round - len(forced)`` places are drawn from the other clients.
    """

    def __init__(self, num_clients: int, per_round: int, seed: int, forced=()):
        self.n, self.k, self.seed = num_clients, per_round, seed
        self.forced = np.asarray(forced, dtype=np.int64).reshape(-1)
        if self.forced.size > per_round:
            raise UserError(f"{self.forced.size} clients must join every round "
                            f"(attack.always_participate=true) but clients_per_round={per_round}; "
                            f"set clients_per_round>={self.forced.size} or null")

    def sample(self, round_idx: int) -> torch.Tensor:
        if self.k >= self.n:
            return torch.arange(self.n)
        rng = np.random.default_rng([self.seed, round_idx, 7])
        if not self.forced.size:
            return torch.from_numpy(np.sort(rng.choice(self.n, self.k, replace=False))).long()
        rest = np.setdiff1d(np.arange(self.n), self.forced)
        picks = rng.choice(rest, self.k - self.forced.size, replace=False)
        return torch.from_numpy(np.sort(np.concatenate([self.forced, picks]))).long()
