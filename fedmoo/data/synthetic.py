"""FedProx's Synthetic(alpha, beta) federated data (Li et al., MLSys 2020).

User k: ``n_k = int(lognormal(4, 2)) + 50`` samples; ``u_k ~ N(0, alpha)`` the mean of its
weights and bias, ``B_k ~ N(0, beta)`` and ``v_k ~ N(B_k, 1)^60`` the mean of its inputs;
``x ~ N(v_k, diag(j^-1.2))``, ``y = argmax(x W_k + b_k)``; its samples split 90/10 after a
shuffle, as the reference generator (whose unseeded draws are seeded here with ``seed``).
"""

from __future__ import annotations

import numpy as np

from fedmoo import budget
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

DIM = 60
NUM_CLASSES = 10
BYTES_PER_SAMPLE = DIM * 4 + 8 + 8 + 1


def generate(num_users: int = 30, alpha: float = 1.0, beta: float = 1.0, seed: int = 0,
             iid: bool = False, max_samples: int | None = None) -> Source:
    fix = ("set fewer num_clients (data.num_users) or cap the samples per user with "
           "data.max_samples")
    fewest = min(50, max_samples or 50)       # every user has at least this many samples
    budget.check(num_users * (fewest * BYTES_PER_SAMPLE + 4 * 8),
                 f"data=synthetic with {num_users} users (at least {fewest} samples each)", fix)
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4, 2, num_users).astype(int) + 50
    if max_samples is not None:
        sizes = np.minimum(sizes, max_samples)
    mean_w = rng.normal(0, alpha, num_users)
    shift = rng.normal(0, beta, num_users)
    cov_diag = np.arange(1, DIM + 1, dtype=np.float64) ** -1.2
    if iid:
        w_global = rng.normal(0, 1, (DIM, NUM_CLASSES))
        b_global = rng.normal(0, 1, NUM_CLASSES)
    total, largest = int(sizes.sum()), int(sizes.max())
    # the Source's tensors (x float32, y and owner int64, is_test bool) and one user's float64
    # draws, checked before anything of that size is allocated
    budget.check(total * BYTES_PER_SAMPLE + largest * DIM * 8 * 3,
                 f"data=synthetic with {num_users} users ({total:,} samples of {DIM} features)",
                 fix)
    x_all = np.empty((total, DIM), dtype=np.float32)
    y_all = np.empty(total, dtype=np.int64)
    is_test = np.zeros(total, dtype=bool)
    start = 0
    for k in range(num_users):
        if iid:
            w, b, v = w_global, b_global, np.zeros(DIM)
        else:
            w = rng.normal(mean_w[k], 1, (DIM, NUM_CLASSES))
            b = rng.normal(mean_w[k], 1, NUM_CLASSES)
            v = rng.normal(shift[k], 1, DIM)
        x = v + rng.standard_normal((sizes[k], DIM)) * np.sqrt(cov_diag)
        end = start + sizes[k]
        y_all[start:end] = np.argmax(x @ w + b, axis=1)
        x_all[start:end] = x                   # float64 -> float32, rounded as torch's .float()
        perm = rng.permutation(sizes[k])
        n_train = int(0.9 * sizes[k])         # the module docstring's 90/10 split
        is_test[start + perm[n_train:]] = True
        start = end
    return Source(
        x=x_all, y=y_all, is_test=is_test,
        owner=np.repeat(np.arange(num_users, dtype=np.int64), sizes),
        num_classes=NUM_CLASSES,
        input_shape=(DIM,),
        client_names=[f"f_{k:05d}" for k in range(num_users)],
        location="memory (generated, no files)",
    )


def load(data_dir, *, num_users: int | None, alpha: float, beta: float, seed: int, iid: bool,
         max_samples: int | None) -> Source:
    """Data-config entry point: the generator needs no files, ``data_dir`` is unused."""
    if num_users is None:     # num_users: ${num_clients} with num_clients: null
        raise UserError("data=synthetic generates its users, so it has no own number of "
                        "clients: set num_clients (e.g. num_clients=30) or data.num_users")
    return generate(num_users, alpha, beta, seed, iid, max_samples)
