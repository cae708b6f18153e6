"""Which clients train in a round."""

from __future__ import annotations

import numpy as np
import torch

from fedmoo.errors import UserError

SCHEMES = ("uniform", "weighted")


class ClientSampler:
    """Sampling without replacement, seeded per round so any round can be replayed.

    Round t draws from ``numpy.random.default_rng([seed, t, 7])``:

    - ``uniform``: ``rng.choice(candidates, m, replace=False)``, every candidate equally likely;
    - ``weighted`` (q-FFL's and FedFV's "with prob. p_k"): ``rng.choice(candidates, m,
      replace=False, p=n_c / sum n_c)`` with ``n`` = the clients' numbers of training samples
      (``sizes``). numpy draws this as successive sampling: the first client with probability
      ``p_k``, each next one with ``p`` renormalised over those not yet drawn.

    ``forced`` clients (e.g. attackers with ``attack.always_participate``) are in every cohort;
    the remaining ``m = per_round - len(forced)`` places are drawn from the other clients (for
    ``weighted``, with ``p`` renormalised over them). The cohort is returned sorted.
    """

    def __init__(self, num_clients: int, per_round: int, seed: int, forced=(),
                 scheme: str = "uniform", sizes=None):
        self.n, self.k, self.seed = num_clients, per_round, seed
        self.forced = np.asarray(forced, dtype=np.int64).reshape(-1)
        if self.forced.size > per_round:
            raise UserError(f"{self.forced.size} clients must join every round "
                            f"(attack.always_participate=true) but clients_per_round={per_round}; "
                            f"set clients_per_round>={self.forced.size} or null")
        if scheme not in SCHEMES:
            raise UserError(f"sampling={scheme!r} is not valid; choose uniform or weighted")
        self.scheme = scheme
        self.rest = np.setdiff1d(np.arange(num_clients), self.forced)
        self.p = None
        if scheme == "weighted" and per_round < num_clients:
            if sizes is None:
                raise ValueError("sampling=weighted needs the clients' sizes")
            n = np.asarray(sizes, dtype=np.float64).reshape(-1)[self.rest]
            if n.size != self.rest.size or np.count_nonzero(n > 0) < per_round - self.forced.size:
                raise UserError(f"sampling=weighted cannot draw {per_round - self.forced.size} "
                                f"clients: only {np.count_nonzero(n > 0)} have training samples; "
                                "lower clients_per_round or use sampling=uniform")
            self.p = n / n.sum()

    def sample(self, round_idx: int) -> torch.Tensor:
        if self.k >= self.n:
            return torch.arange(self.n)
        rng = np.random.default_rng([self.seed, round_idx, 7])
        if not self.forced.size and self.p is None:      # (the draws of earlier versions)
            return torch.from_numpy(np.sort(rng.choice(self.n, self.k, replace=False))).long()
        picks = rng.choice(self.rest, self.k - self.forced.size, replace=False, p=self.p)
        return torch.from_numpy(np.sort(np.concatenate([self.forced, picks]))).long()
