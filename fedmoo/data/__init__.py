"""Datasets and their federation: ``load_federated(cfg)`` -> FederatedData."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmoo.config import hparams
from fedmoo.data import partition as _partition
from fedmoo.data.checks import check_labels, reason
from fedmoo.data.federated import MULTITASK, ClientSplit, FederatedData, Source
from fedmoo.errors import UserError
from fedmoo.config.hparams.partition import Partition
from fedmoo.config.hparams.data import DESCRIBED

# The keys every partition takes (fedmoo.data.federate reads them; the rest go to the partitioner)
COMMON = tuple(f.name for f in dataclasses.fields(Partition))


_shared: dict[str, Source] | None = None   # sources kept while ``sharing_sources`` is on


@contextlib.contextmanager
def sharing_sources() -> Iterator[None]:
    """Within the block, loading the same data config from the same folder again returns the
    source already loaded (one process running many runs of one dataset: a lockstep sweep).
    Sources are never modified in place, so sharing them is safe."""
    global _shared
    outer = _shared
    _shared = {} if outer is None else outer
    try:
        yield
    finally:
        _shared = outer


def load_source(data_cfg: dict[str, Any], data_dir: str | Path) -> Source:
    key = json.dumps([data_cfg, str(Path(data_dir).resolve())], sort_keys=True, default=str)
    if _shared is not None and key in _shared:
        return _shared[key]
    name = data_cfg.get("name")
    loader = hparams.component("data", name)       # declared with its slug and settings
    given = {k: v for k, v in data_cfg.items() if k not in hparams.NOTES}
    settings = hparams.resolve("data", name, given)
    try:
        src = loader(Path(data_dir), **{k: v for k, v in settings.items() if k not in DESCRIBED})
    except OSError as e:     # a folder it may not list, an I/O error: its message names the path
        raise UserError(f"data={name}: cannot read its files ({reason(e)})") from None
    check_described(name, data_cfg, src)
    for what, t in (("features", src.x), ("targets", src.y)):   # NaN / inf would train to NaN
        if t.is_floating_point() and not bool(torch.isfinite(t.sum())):
            bad = ~torch.isfinite(t)     # (a finite sum means every value is finite)
            if bool(bad.any()):
                row = int(bad.reshape(len(t), -1).any(1).nonzero()[0, 0])
                raise UserError(f"data={name}: its {what} hold {int(bad.sum())} values that are "
                                f"not finite (NaN or inf; the first in sample {row}); its files "
                                "are damaged or hold missing values; re-download or regenerate "
                                "them (see docs/datasets.md)")
    if src.task != "multitask_regression" and not src.y.is_floating_point():
        check_labels(src.y.cpu().numpy(), src.num_classes, f"data={name}",
                     "its files are damaged; re-download or regenerate them (see docs/datasets.md)")
    if _shared is not None:
        _shared[key] = src
    return src


def check_described(name: str, data_cfg: dict[str, Any], src: Source) -> None:
    """The keys that describe a dataset (``input_shape``, ``num_classes``) must say what its
    samples are: the loader fixes them, so another value would change nothing but the record of
    the run (summary.json would claim a run that never happened)."""
    actual = {"input_shape": list(src.input_shape), "num_classes": src.num_classes}
    for key, value in actual.items():
        given = data_cfg.get(key)
        if given is None:
            continue
        if (list(given) if isinstance(given, (list, tuple)) else given) != value:
            raise UserError(f"data.{key}={given!r} does not describe data={name}, whose samples "
                            f"have {key} {value!r}; the dataset fixes it, so remove the override "
                            f"(or set data.{key}={value})".replace("'", ""))


def federate(source: Source, part_cfg: dict[str, Any], num_clients: int | None) -> FederatedData:
    """Partition a source into ``num_clients`` clients with train / val / test index sets.

    ``num_clients=None`` means the dataset's own clients (``partition=natural``; other partitions
    need a number). ``part_cfg``'s keys are those the partition declares
    (fedmoo.config.hparams.partition), a missing one at its declared default."""
    name = part_cfg.get("name")
    fn = hparams.component("partition", name)      # None for natural (the owners decide)
    hp = hparams.resolve("partition", name, {k: v for k, v in part_cfg.items() if k != "name"})
    own = {k: v for k, v in hp.items() if k not in COMMON}   # the partitioner's keywords
    rng = np.random.default_rng(hp["seed"])
    y = source.y.numpy() if source.y.dim() == 1 else source.y[:, 0].numpy()
    is_test = source.is_test.numpy()

    if name == "natural":
        if source.owner is None:
            raise UserError("partition=natural needs a naturally federated dataset "
                            "(synthetic, femnist, shakespeare, adult); use partition=iid/shards/dirichlet")
        owner = source.owner.numpy()
        n_owners = int(owner.max()) + 1
        if num_clients is None:              # num_clients: null = the dataset's own clients
            num_clients = n_owners
        if num_clients != n_owners:
            raise UserError(
                f"num_clients={num_clients} but this dataset has {n_owners} natural clients; "
                f"set num_clients={n_owners}"
            )
        def assign(idx):   # each owner's indices in their order: one sort, not one pass each
            idx = idx[owner[idx] >= 0]       # owner -1: a sample no client holds
            own = owner[idx]
            ends = np.cumsum(np.bincount(own, minlength=n_owners))[:-1]
            return np.split(idx[np.argsort(own, kind="stable")], ends)
    else:
        unowned = 0 if source.owner is None else int((source.owner < 0).sum())
        if unowned:        # only the natural partition honours "no client holds this sample"
            raise UserError(f"the data leaves {unowned} samples to no client (e.g. "
                            f"data.train_rows=authors_code), which partition={name} would deal "
                            "out anyway; use partition=natural")
        if num_clients is None:
            raise UserError(f"num_clients=null (the dataset's own clients) needs "
                            f"partition=natural; partition={name} needs a number of clients, "
                            "e.g. num_clients=100")
        assign = lambda idx: [idx[p] for p in fn(y[idx], num_clients, rng, **own)]  # noqa: E731

    if hp["split"] == "dataset":
        train_idx = np.flatnonzero(~is_test)
        test_idx = np.flatnonzero(is_test)
        if len(test_idx) == 0 and name != "natural":   # (its partitioner would say "0 samples")
            raise UserError("the data has no test samples (an empty test file?), and "
                            "partition.split=dataset evaluates each client on them; check the "
                            "data files (docs/datasets.md) or use partition.split=pooled")
        train = assign(train_idx)
        test = assign(test_idx) if name == "natural" else \
            _test_like_train(train, y, test_idx, rng, train_idx)
        val = None
    else:                                    # pooled (the declaration allows no other)
        parts = assign(np.arange(len(y)) if hp["pool"] == "all" else np.flatnonzero(~is_test))
        train, val, test = _partition.split_fractions(parts, tuple(hp["fractions"]), rng,
                                                      tuple(hp["order"]))

    if (cap := hp["max_per_client"]) is not None:   # a random n of each client's (FMGDA's 256)
        train = [np.sort(rng.choice(p, cap, replace=False)) if len(p) > cap else p for p in train]
    empty = [k for k, p in enumerate(train) if len(p) == 0]
    if empty:
        raise UserError(
            f"partition={name} left client {empty[0]} (and {len(empty) - 1} more) without training "
            f"samples; lower num_clients (now {num_clients}) or change the partition"
        )
    task_mask = task_names = None
    if source.task in MULTITASK:
        task_names = source.task_names or [f"task{s}" for s in range(source.y.shape[1])]
        task_mask = torch.from_numpy(_partition.objective_indicator(
            hp["tasks"], hp["tasks_per_client"], num_clients, task_names, rng))
    elif hp["tasks"] not in ("all", None) or hp["tasks_per_client"] is not None:
        raise UserError(f"partition.tasks / partition.tasks_per_client need multi-task data; "
                        f"data={source.task} has one objective, so leave them at all / null")
    x, y_all, num_classes = source.x, source.y, source.num_classes
    if hp["compact_labels"]:
        x, y_all, num_classes, (train, val, test) = _compact(x, y_all, (train, val, test))
    return FederatedData(
        x=x, y=y_all,
        train=ClientSplit.from_lists(train), test=ClientSplit.from_lists(test),
        val=None if val is None else ClientSplit.from_lists(val),
        num_classes=num_classes, input_shape=tuple(source.input_shape), task=source.task,
        client_names=source.client_names if name == "natural" else None,
        class_names=source.class_names, task_mask=task_mask, task_names=task_names,
        source_digest=source.digest,
    )


def _compact(x, y, splits):
    """Keep only the samples some client uses and renumber their labels 0..C'-1 in label order
    (e.g. FMNIST classes 0, 2, 6 -> 0, 1, 2 for a 3-class model)."""
    if y.dim() != 1:
        raise UserError("partition.compact_labels=true needs single-label data")
    used = np.unique(np.concatenate([p for parts in splits if parts is not None for p in parts]))
    labels, y_new = torch.unique(y[torch.from_numpy(used)], return_inverse=True)
    remap = [None if s is None else [np.searchsorted(used, p) for p in s] for s in splits]
    return x[torch.from_numpy(used)], y_new, int(labels.numel()), remap


def _test_like_train(train: list[np.ndarray], y: np.ndarray, test_idx: np.ndarray,
                     rng: np.random.Generator, train_pool: np.ndarray) -> list[np.ndarray]:
    """Give each client test samples with its training label distribution: a test sample of label c
    goes to a client drawn with probability proportional to its training samples of label c.
    Classes of the training pool given to nobody (one_class_per_client's unused classes) are left
    out; classes absent from the training pool are spread evenly."""
    if not np.issubdtype(y.dtype, np.integer):      # regression targets: spread uniformly
        idx, owners = test_idx, rng.choice(len(train), size=len(test_idx))
    else:
        n_cls = int(y.max()) + 1
        counts = np.stack([np.bincount(y[p], minlength=n_cls) for p in train]).astype(float)
        in_pool = np.bincount(y[train_pool], minlength=n_cls) > 0
        idx, owners = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for c in range(n_cls):
            of_c = test_idx[y[test_idx] == c]
            if len(of_c) == 0 or (in_pool[c] and counts[:, c].sum() == 0):
                continue
            w = counts[:, c] if counts[:, c].sum() > 0 else np.full(len(train), 1.0)
            idx.append(of_c)
            owners.append(rng.choice(len(train), size=len(of_c), p=w / w.sum()))
        idx, owners = np.concatenate(idx), np.concatenate(owners)
    return [np.sort(idx[owners == k]) for k in range(len(train))]


def load_federated(data_cfg: dict[str, Any], part_cfg: dict[str, Any], num_clients: int | None,
                   data_dir: str | Path) -> FederatedData:
    return federate(load_source(data_cfg, data_dir), part_cfg, num_clients)


__all__ = ["ClientSplit", "FederatedData", "Source", "federate", "load_federated", "load_source"]
