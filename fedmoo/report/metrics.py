"""Fairness and accuracy metrics over per-client vectors. Names are rounds.csv columns.

All functions are pure (numpy in, floats out). Accuracies are in percent; std and var are
population statistics (ddof 0), as in the FedFV, AdaFed, q-FFL and FedMGDA+ code.
"""

from __future__ import annotations

import math

import numpy as np

TAIL_PERCENTS = (5, 10, 20)
PER_CLIENT_MAX = 10  # federations up to this size also get one column per client


def tail_mean(s: np.ndarray, percent: float, worst: bool) -> float:
    """Mean of the int(percent% N) lowest (worst) or highest clients of a sorted ``s``, at least
    one client."""
    m = max(1, int(percent / 100.0 * len(s)))
    return float(s[:m].mean() if worst else s[-m:].mean())


def percentile_sorted(s: np.ndarray, q: float) -> float:
    """``np.percentile(s, q)`` (its default linear interpolation, to the last bit) of a sorted
    ``s``: one sort serves all of a row's statistics; np.percentile sorts again each call."""
    pos = (len(s) - 1) * (q / 100.0)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    t, a, b = pos - lo, float(s[lo]), float(s[hi])
    return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t


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
    """The full metric suite for one evaluation of N clients. Clients without samples are left
    out of every statistic, NaN in ``acc_client{k}`` and counted in ``clients_missing``."""
    has = np.asarray(count) > 0
    a = np.asarray(acc, dtype=np.float64)[has]
    out: dict[str, float] = {}
    if len(a) == 0:
        return out
    if not has.all():
        out[f"{prefix}/clients_missing"] = float((~has).sum())
    std = float(a.std())
    out[f"{prefix}/acc_mean"] = float(a.mean())
    out[f"{prefix}/acc_pooled"] = float(100.0 * np.sum(correct) / max(np.sum(count), 1))
    out[f"{prefix}/acc_std"] = std
    out[f"{prefix}/acc_var"] = std * std
    ranked = np.sort(a)
    for p in TAIL_PERCENTS:
        out[f"{prefix}/acc_worst{p}"] = tail_mean(ranked, p, worst=True)
        out[f"{prefix}/acc_best{p}"] = tail_mean(ranked, p, worst=False)
    out[f"{prefix}/acc_p5"] = percentile_sorted(ranked, 5)
    out[f"{prefix}/acc_p95"] = percentile_sorted(ranked, 95)
    out[f"{prefix}/acc_angle"] = angle_to_uniform(a)
    out[f"{prefix}/acc_kl"] = kl_to_uniform(a)
    out[f"{prefix}/loss_mean"] = float(np.asarray(loss, dtype=np.float64)[has].mean())
    if len(acc) <= PER_CLIENT_MAX:
        for k, v in enumerate(acc):
            out[f"{prefix}/acc_client{k}"] = float(v) if has[k] else math.nan
    return out


GROUP_STATS = ("acc_mean", "acc_pooled", "acc_std", "acc_worst10", "acc_best10", "loss_mean")


def group_metrics(acc: np.ndarray, correct: np.ndarray, count: np.ndarray, loss: np.ndarray,
                  mask: np.ndarray, prefix: str) -> dict[str, float]:
    """``GROUP_STATS`` over the clients selected by the bool ``mask`` (e.g. the benign ones)."""
    m = np.asarray(mask, dtype=bool)
    full = accuracy_metrics(np.asarray(acc)[m], np.asarray(correct)[m], np.asarray(count)[m],
                            np.asarray(loss)[m], prefix=prefix)
    return {f"{prefix}/{s}": full[f"{prefix}/{s}"] for s in GROUP_STATS if f"{prefix}/{s}" in full}


def task_metrics(loss: np.ndarray, acc: np.ndarray, count: np.ndarray, mask: np.ndarray | None,
                 prefix: str = "test", regression: bool = False,
                 reference: np.ndarray | None = None) -> dict[str, float]:
    """Per-task metrics of one evaluation on multi-task data (``loss`` / ``acc`` ``[N, S]``), each
    task over the clients holding it (``mask [N, S]``, default all) that have samples:
    ``task{s}_loss`` (the paper's ``f_s = 1/|R_s| sum_i f_si``), ``task{s}_acc_mean``,
    ``task{s}_loss_norm`` (loss / ``reference[s]``, the initial model's), and over the tasks
    ``loss_mean``, ``loss_max`` and ``acc_mean``."""
    loss, acc = np.asarray(loss, np.float64), np.asarray(acc, np.float64)
    n, s = loss.shape
    held = np.ones((n, s), bool) if mask is None else np.asarray(mask, bool)
    held = held & (np.asarray(count) > 0)[:, None]
    out: dict[str, float] = {}
    task_loss, task_acc = [], []
    for t in range(s):
        if not held[:, t].any():
            continue
        task_loss.append(float(loss[held[:, t], t].mean()))
        out[f"{prefix}/task{t}_loss"] = task_loss[-1]
        if not regression:
            task_acc.append(float(acc[held[:, t], t].mean()))
            out[f"{prefix}/task{t}_acc_mean"] = task_acc[-1]
        if reference is not None:
            out[f"{prefix}/task{t}_loss_norm"] = task_loss[-1] / max(float(reference[t]), 1e-12)
    if task_loss:
        out[f"{prefix}/loss_mean"] = float(np.mean(task_loss))
        out[f"{prefix}/loss_max"] = float(np.max(task_loss))
    if task_acc:
        out[f"{prefix}/acc_mean"] = float(np.mean(task_acc))
    return out


def rounds_to_threshold(rows: list[dict], num_tasks: int, threshold: float) -> dict[str, float]:
    """First logged round at which each task's ``train/task{s}_loss`` is below ``threshold``
    (``task{s}_rounds_to_threshold``) and at which every logged task's is (``rounds_to_threshold``);
    NaN if never. Tasks no client holds are never logged and are left out."""
    keys = [f"train/task{t}_loss" for t in range(num_tasks)]
    logged = [t for t, k in enumerate(keys) if any(r.get(k) not in (None, "") for r in rows)]
    first = [math.nan] * num_tasks
    every = math.nan
    for r in rows:
        below = {t: r.get(keys[t]) not in (None, "") and float(r[keys[t]]) < threshold
                 for t in logged}
        for t, b in below.items():
            if b and math.isnan(first[t]):
                first[t] = float(r["round"])
        if logged and all(below.values()) and math.isnan(every):
            every = float(r["round"])
    out = {f"train/task{t}_rounds_to_threshold": v for t, v in enumerate(first)}
    out["train/rounds_to_threshold"] = every
    return out
