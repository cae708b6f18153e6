"""Property tests of the partitioners and of federate()'s splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedmoo.config import hparams
from fedmoo.data import COMMON, federate
from fedmoo.data.federated import Source
from fedmoo.errors import UserError


def _labels(per_class=100, classes=10):
    return np.repeat(np.arange(classes), per_class)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _part(name, labels, num_clients, rng, **given):
    """The partitioner called as federate calls it: its own keys at their declared defaults."""
    own = {k: v for k, v in hparams.resolve("partition", name, given).items() if k not in COMMON}
    return hparams.component("partition", name)(labels, num_clients, rng, **own)


def test_shards_equal_sizes_few_labels_disjoint():
    y = _labels(500)                                   # 5000 samples, like a tiny CIFAR-10
    parts = _part("shards", y, 100, _rng(), shards_per_client=5, num_shards=500)
    assert {len(p) for p in parts} == {50}             # 500 shards of 10, 5 each
    assert max(len(np.unique(y[p])) for p in parts) <= 5
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx) == 5000


def test_shards_straddle_only_with_uneven_classes_and_more_shards_than_needed():
    y = np.repeat(np.arange(3), [7, 11, 13])
    parts = _part("shards", y, 4, _rng(), shards_per_client=2, num_shards=10)
    assert {len(p) for p in parts} == {6}              # 2 shards of 31 // 10 = 3; 8 of 10 used
    assert max(len(np.unique(y[p])) for p in parts) <= 4


def test_shards_errors():
    with pytest.raises(UserError, match="num_shards=10 is fewer"):
        _part("shards", _labels(), 10, _rng(), shards_per_client=2, num_shards=10)


def test_dirichlet_seeded_min_size_and_skew_grows_as_beta_falls():
    y = _labels(200)
    d = lambda *a, **kw: _part("dirichlet", *a, **kw)  # noqa: E731
    a = d(y, 20, _rng(3), beta=0.5, min_size=10)
    b = d(y, 20, _rng(3), beta=0.5, min_size=10)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert min(len(p) for p in a) >= 10
    assert sorted(np.concatenate(a).tolist()) == list(range(2000))

    def mean_entropy(parts):
        h = []
        for p in parts:
            q = np.bincount(y[p], minlength=10) / len(p)
            h.append(-(q[q > 0] * np.log(q[q > 0])).sum())
        return np.mean(h)

    ent = [mean_entropy(d(y, 20, _rng(1), beta=beta, min_size=5)) for beta in (100.0, 1.0, 0.05)]
    assert ent[0] > ent[1] > ent[2]
    assert ent[0] > 2.2 and ent[2] < 1.0               # log(10) = 2.30 is perfectly mixed


def test_dirichlet_impossible_minimum_is_a_user_error():
    with pytest.raises(UserError, match="min_size=50"):
        _part("dirichlet", _labels(10), 5, _rng(), min_size=50)


def test_one_class_per_client_one_label_each():
    y = _labels(7)
    parts = _part("one_class_per_client", y, 3, _rng(), classes=[0, 2, 6])
    assert [np.unique(y[p]).tolist() for p in parts] == [[0], [2], [6]]
    assert [len(p) for p in parts] == [7, 7, 7]
    with pytest.raises(UserError, match="set num_clients=3"):
        _part("one_class_per_client", y, 4, _rng(), classes=[0, 2, 6])


def test_femnist_skewed_five_letters_per_device():
    y = np.repeat(np.arange(62), 100)
    parts = _part("femnist_skewed", y, 100, _rng(), classes_per_client=5)
    for k, p in enumerate(parts):
        assert np.unique(y[p]).tolist() == sorted(36 + (k + j) % 10 for j in range(5))
    allidx = np.concatenate(parts)
    assert {len(p) for p in parts} == {10}               # 100 per letter split among 50 devices
    assert len(np.unique(allidx)) == len(allidx) == 1000


def _source(y, is_test):
    y = np.asarray(y)
    return Source(x=torch.arange(len(y), dtype=torch.float32)[:, None], y=torch.from_numpy(y),
                  is_test=torch.from_numpy(np.asarray(is_test)), num_classes=10, input_shape=(1,))


def test_fedfv_fmnist_recipe_pooled_compact_train_test_val():
    # 7 images per class in the pool (5 train + 2 test), classes 0, 2, 6 kept and renumbered
    y = np.concatenate([np.repeat(np.arange(10), 5), np.repeat(np.arange(10), 2)])
    is_test = np.arange(len(y)) >= 50
    cfg = {"name": "one_class_per_client", "classes": [0, 2, 6], "seed": 0, "split": "pooled",
           "fractions": [0.6, 0.1, 0.3], "order": ["train", "test", "val"], "compact_labels": True}
    fed = federate(_source(y, is_test), cfg, 3)
    assert fed.num_classes == 3 and len(fed.y) == 21
    assert fed.train.sizes.tolist() == [4, 4, 4]        # int(0.6 * 7)
    assert fed.test.sizes.tolist() == [2, 2, 2]         # cut second: int(0.9 * 7) - 4
    assert fed.val.sizes.tolist() == [1, 1, 1]
    for k in range(3):
        idx = torch.cat([fed.train.of(k), fed.test.of(k), fed.val.of(k)])
        assert set(fed.y[idx].tolist()) == {k}
        original = fed.x[idx, 0].long().numpy()         # x holds the original sample index
        assert sorted(y[original].tolist()) == [[0, 2, 6][k]] * 7
        assert is_test[original].sum() == 2             # train AND test images are pooled


def test_dataset_split_drops_test_classes_nobody_trains_on():
    y = np.concatenate([np.repeat(np.arange(4), 3), np.repeat(np.arange(4), 2)])
    is_test = np.arange(len(y)) >= 12
    cfg = {"name": "one_class_per_client", "classes": [1, 3], "split": "dataset",
           "compact_labels": False}   # its declared default is true
    fed = federate(_source(y, is_test), cfg, 2)
    assert [fed.y[fed.test.of(k)].tolist() for k in range(2)] == [[1, 1], [3, 3]]


def test_pool_train_leaves_the_dataset_test_split_out():
    y = np.concatenate([np.repeat(np.arange(10), 10), np.repeat(np.arange(10), 5)])
    is_test = np.arange(len(y)) >= 100
    cfg = {"name": "shards", "shards_per_client": 2, "split": "pooled", "pool": "train",
           "fractions": [0.8, 0.0, 0.2]}
    fed = federate(_source(y, is_test), cfg, 5)
    used = torch.cat([fed.train.index, fed.test.index])
    assert not torch.from_numpy(is_test)[used].any()
    assert fed.train.sizes.tolist() == [16] * 5 and fed.test.sizes.tolist() == [4] * 5


def test_unknown_partition_option_names_the_allowed_ones():
    with pytest.raises(UserError, match=r"^partition.shards_per_clent is not a hyperparameter of "
                       r"partition=shards; valid keys: .*shards_per_client"):
        federate(_source(_labels(2), np.zeros(20, bool)),
                 {"name": "shards", "shards_per_clent": 2}, 2)
