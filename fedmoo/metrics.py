"""Fairness and accuracy metrics over per-client vectors. Names are rounds.csv columns.

All functions are pure (numpy in, floats out). Accuracies are in percent; std and var are
population statistics (ddof 0), as in the FedFV, AdaFed, q-FFL and FedMGDA+ code.
"""

from __future__ import annotations

import math

import numpy as np

TAIL_PERCENTS = (5, 10, 20)
PER_CLIENT_MAX = 10  # federations up to this size also get one column per client


def tail_mean(a: np.ndarray, percent: float, worst: bool) -> float:
    """Mean of the int(percent% N) lowest (worst) or highest clients, at least one client."""
    s = np.sort(np.asarray(a, dtype=np.float64))
    m = max(1, int(percent / 100.0 * len(s)))
    return float(s[:m].mean() if worst else s[-m:].mean())


def angle_to_uniform(a: np.ndarray) -> float:
    """Angle in degrees between the accuracy vector and the all-ones vector (0 = perfectly fair)."""
    a = np.asarray(a, dtype=np.float64)
    norm = np.linalg.norm(a)
    if norm == 0:
        return 0.0
    c = float(a.sum() / (norm * math.sqrt(len(a))))
    return math.degrees(math.acos(min(1.0, max(-1.0, c))))


def kl_to_uniform(a: np.ndarray) -> float:
    """KL(a / sum a || uniform) in nats; 0 when every client has the same accuracy."""
    a = np.asarray(a, dtype=np.float64)
    total = a.sum()
    if total <= 0:
        return 0.0
    p = a / total
    nz = p > 0
    return float(np.sum(p[nz] * np.log(p[nz] * len(a))))


def accuracy_metrics(acc: np.ndarray, correct: np.ndarray, count: np.ndarray, loss: np.ndarray,
                     prefix: str = "test") -> dict[str, float]:
    """The full metric suite for one evaluation of N clients (clients without samples skipped)."""
    has = np.asarray(count) > 0
    a = np.asarray(acc, dtype=np.float64)[has]
    out: dict[str, float] = {}
    if len(a) == 0:
        return out
    std = float(a.std())
    out[f"{prefix}/acc_mean"] = float(a.mean())
    out[f"{prefix}/acc_pooled"] = float(100.0 * np.sum(correct) / max(np.sum(count), 1))
    out[f"{prefix}/acc_std"] = std
    out[f"{prefix}/acc_var"] = std * std
    for p in TAIL_PERCENTS:
        out[f"{prefix}/acc_worst{p}"] = tail_mean(a, p, worst=True)
        out[f"{prefix}/acc_best{p}"] = tail_mean(a, p, worst=False)
    out[f"{prefix}/acc_p5"] = float(np.percentile(a, 5))
    out[f"{prefix}/acc_p95"] = float(np.percentile(a, 95))
    out[f"{prefix}/acc_angle"] = angle_to_uniform(a)
    out[f"{prefix}/acc_kl"] = kl_to_uniform(a)
    out[f"{prefix}/loss_mean"] = float(np.asarray(loss, dtype=np.float64)[has].mean())
    if len(acc) <= PER_CLIENT_MAX:
        for k, v in enumerate(acc):
            out[f"{prefix}/acc_client{k}"] = float(v)
    return out


GROUP_STATS = ("acc_mean", "acc_pooled", "acc_std", "acc_worst10", "acc_best10", "loss_mean")


def group_metrics(acc: np.ndarray, correct: np.ndarray, count: np.ndarray, loss: np.ndarray,
                  mask: np.ndarray, prefix: str) -> dict[str, float]:
    """A compact metric set over the clients selected by the bool ``mask`` (e.g. benign ones):
    ``<prefix>/acc_mean``, ``acc_pooled``, ``acc_std``, ``acc_worst10``, ``acc_best10``, ``loss_mean``."""
    m = np.asarray(mask, dtype=bool)
    full = accuracy_metrics(np.asarray(acc)[m], np.asarray(correct)[m], np.asarray(count)[m],
                            np.asarray(loss)[m], prefix=prefix)
    return {f"{prefix}/{s}": full[f"{prefix}/{s}"] for s in GROUP_STATS if f"{prefix}/{s}" in full}
