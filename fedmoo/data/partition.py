"""Client partitions: a partitioner maps the labels of a sample pool to one index array per client,
seeded by ``partition.seed``. Its own keys are keyword-only without defaults: they are declared
in fedmoo.config.hparams.partition, so the checks here only need the labels or the clients."""

from __future__ import annotations

import numpy as np

from fedmoo.errors import UserError
from fedmoo.config.hparams.partition import FEMNIST_LETTERS, SPLITS


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random, equal-size (up to one sample) split of the pool."""
    if len(labels) < num_clients:
        raise UserError(
            f"partition=iid cannot give {num_clients} clients a sample each from {len(labels)} "
            "samples; lower num_clients"
        )
    return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)]


def shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator, *,
           shards_per_client: int, num_shards: int | None) -> list[np.ndarray]:
    """McMahan et al.'s pathological split: sort by label, cut ``num_shards`` equal contiguous shards
    (default ``num_clients * shards_per_client``; samples beyond them are left out) and give each
    client ``shards_per_client`` distinct random shards."""
    spc = shards_per_client
    need = num_clients * spc
    total = need if num_shards is None else num_shards
    if total < need:
        raise UserError(
            f"partition.num_shards={total} is fewer than num_clients x shards_per_client = "
            f"{num_clients} x {spc}; raise num_shards or lower shards_per_client"
        )
    size = len(labels) // total
    if size == 0:
        raise UserError(f"partition=shards: {len(labels)} samples cannot fill {total} shards; "
                        "lower partition.num_shards or num_clients")
    order = np.argsort(labels, kind="stable")
    chosen = rng.permutation(total)[:need].reshape(num_clients, spc)
    return [np.sort(np.concatenate([order[s * size:(s + 1) * size] for s in row]))
            for row in chosen]


def dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator, *, beta: float,
              min_size: int, max_tries: int) -> list[np.ndarray]:
    """Label skew by Dirichlet(beta) proportions per class (NIID-Bench's ``noniid-labeldir``).

    Each class's shuffled samples are cut among the clients with Dirichlet(beta, ..., beta)
    proportions, giving nothing more to clients that already hold N / num_clients samples; the draw
    is repeated until every client has at least ``min_size`` samples. Smaller beta = more skew."""
    n = len(labels)
    if min_size * num_clients > n:
        raise UserError(f"partition.min_size={min_size} x num_clients={num_clients} exceeds the "
                        f"{n} samples; lower min_size or num_clients")
    classes = np.unique(labels)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            open_ = sizes < n / num_clients
            p = rng.dirichlet(np.full(num_clients, beta)) * open_
            p = p / p.sum() if p.sum() > 0 else open_ / open_.sum()
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
                sizes[k] += len(chunk)
        if sizes.min() >= min_size:
            return [np.sort(np.concatenate(q)) for q in parts]
    raise UserError(f"partition=dirichlet found no split with every client holding >= "
                    f"{min_size} samples in {max_tries} tries; lower partition.min_size or "
                    "num_clients, or raise partition.beta")


def one_class_per_client(labels: np.ndarray, num_clients: int, rng: np.random.Generator, *,
                         classes: list[int] | None) -> list[np.ndarray]:
    """Client k holds every sample of ``classes[k]`` (default: class k); other classes are unused.
    FedFV Table 3 / AdaFed Table 7: classes [0, 2, 6] of Fashion-MNIST (T-shirt, pullover, shirt)."""
    cls = list(range(num_clients)) if classes is None else list(classes)
    if len(cls) != num_clients:
        raise UserError(f"partition.classes has {len(cls)} classes but num_clients={num_clients}; "
                        f"set num_clients={len(cls)}")
    return [np.flatnonzero(labels == c) for c in cls]


def femnist_skewed(labels: np.ndarray, num_clients: int, rng: np.random.Generator, *,
                   classes: list[int] | None, classes_per_client: int) -> list[np.ndarray]:
    """FedProx-style skew: client k holds classes ``classes[(k + j) % C]`` for
    ``j < classes_per_client``, each class's shuffled samples split evenly among its clients.
    Default classes 36..45 = lower-case a..j of the 62 FEMNIST / EMNIST-byclass classes."""
    cls = list(FEMNIST_LETTERS if classes is None else classes)
    owners: dict[int, list[int]] = {c: [] for c in range(len(cls))}
    for k in range(num_clients):
        for j in range(classes_per_client):   # 1..len(cls): the declaration checks it
            owners[(k + j) % len(cls)].append(k)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, ks in owners.items():
        idx = rng.permutation(np.flatnonzero(labels == cls[c]))
        for k, chunk in zip(ks, np.array_split(idx, len(ks)) if ks else []):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(q)) for q in parts]


def split_fractions(parts: list[np.ndarray], fractions: tuple[float, float, float],
                    rng: np.random.Generator,
                    order: tuple[str, ...]) -> tuple[list[np.ndarray], ...]:
    """Shuffle each client's samples and cut them into train / val / test by ``fractions``, the
    pieces cut in ``order`` (the FedFV code cuts train, test, val) at ``int(f_1 n)`` and
    ``int((f_1 + f_2) n)`` as in the reference codes."""
    share = dict(zip(SPLITS, fractions))
    out: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    for p in parts:
        p = rng.permutation(p)
        n = len(p)
        a = int(share[order[0]] * n)
        b = int((share[order[0]] + share[order[1]]) * n)
        for name, piece in zip(order, (p[:a], p[a:b], p[b:])):
            out[name].append(piece)
    return out["train"], out["val"], out["test"]


def objective_indicator(tasks, tasks_per_client, num_clients: int, task_names: list[str],
                        rng: np.random.Generator) -> np.ndarray:
    """The objective indicator ``A [N, S]`` (bool) of a multi-task federation, one row per client.

    ``tasks``: ``all`` or one list per client of task indices or names. ``tasks_per_client``: n
    draws n distinct tasks per client with the partition generator (after the samples are
    assigned, so the partition does not change). The declaration refuses both set."""
    s = len(task_names)
    if tasks_per_client is None and tasks in ("all", None):
        return np.ones((num_clients, s), dtype=bool)
    a = np.zeros((num_clients, s), dtype=bool)
    if tasks_per_client is not None:
        if tasks_per_client > s:
            raise UserError(f"partition.tasks_per_client={tasks_per_client!r} must be an integer "
                            f"in [1, {s}] (this data has {s} tasks)")
        for k in range(num_clients):
            a[k, rng.choice(s, tasks_per_client, replace=False)] = True
        return a
    if len(tasks) != num_clients:       # (a list: the declaration refuses anything else)
        raise UserError(f"partition.tasks must be all or one list of tasks per client "
                        f"({num_clients} lists), got {len(tasks)} lists; e.g. partition.tasks=all")
    for k, held in enumerate(tasks):
        held = [held] if isinstance(held, (int, str)) else list(held)
        if not held:
            raise UserError(f"partition.tasks[{k}] is empty: every client must hold a task")
        for t in held:
            if isinstance(t, str) and t in task_names:
                t = task_names.index(t)
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < s:
                raise UserError(f"partition.tasks[{k}] names task {t!r}; use indices 0..{s - 1} "
                                f"or names {', '.join(task_names)}")
            a[k, t] = True
    return a
