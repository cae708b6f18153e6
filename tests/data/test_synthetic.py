"""FedProx Synthetic(alpha, beta) generator statistics."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from fedmoo.data import federate
from fedmoo.data.synthetic import generate
from tests.data.sources import source


def test_shapes_classes_and_user_sizes():
    src = generate(num_users=30, alpha=1.0, beta=1.0, seed=0)
    assert src.x.shape[1] == 60 and src.input_shape == (60,) and src.num_classes == 10
    sizes = torch.bincount(src.owner, minlength=30).numpy()
    assert len(sizes) == 30 and sizes.min() >= 50            # lognormal(4, 2) + 50
    assert src.y.min() >= 0 and src.y.max() <= 9
    # per-user 90/10 split after a shuffle
    test = torch.bincount(src.owner[src.is_test], minlength=30).numpy()
    assert np.array_equal(sizes - test, (0.9 * sizes).astype(int))


def test_seeded_and_sizes_follow_lognormal():
    a, b = generate(num_users=5, seed=3), generate(num_users=5, seed=3)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    expected = np.random.default_rng(3).lognormal(4, 2, 5).astype(int) + 50
    assert np.array_equal(torch.bincount(a.owner).numpy(), expected)


def test_labels_are_argmax_of_a_per_user_linear_model():
    src = generate(num_users=4, seed=1, max_samples=400)
    for k in range(4):
        m = src.owner == k
        x, y = src.x[m].double(), src.y[m]
        # a linear classifier must fit each user's labels perfectly (they are its argmax)
        w = torch.zeros(60, 10, dtype=torch.float64, requires_grad=True)
        b = torch.zeros(10, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=200)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ w + b, y)
            loss.backward()
            return loss

        opt.step(closure)
        assert ((x @ w + b).argmax(1) == y).double().mean() > 0.97


def test_iid_variant_and_cap():
    src = generate(num_users=3, seed=0, iid=True, max_samples=60)
    assert torch.bincount(src.owner).max() <= 60


def test_natural_federation_keeps_users_train_test():
    src = generate(num_users=6, seed=0, max_samples=100)
    fed = federate(src, {"name": "natural", "seed": 0, "split": "dataset"}, num_clients=6)
    assert fed.num_clients == 6 and fed.val is None
    for k in range(6):
        assert (src.owner[fed.train.of(k)] == k).all() and (src.owner[fed.test.of(k)] == k).all()
        assert not src.is_test[fed.train.of(k)].any() and src.is_test[fed.test.of(k)].all()


@pytest.mark.parametrize("kwargs,message", [
    ({"alpha": -1}, "data.alpha=-1 must be a number in [0.0, inf)"),
    ({"beta": float("inf")}, "data.beta=inf must be a number in [0.0, inf)"),
    ({"max_samples": 0}, "data.max_samples=0 must be a positive integer or null"),
    ({"num_users": 0}, "data.num_users=0 must be a positive integer"),
])
def test_bad_options_are_one_line(kwargs, message):
    from fedmoo.errors import UserError

    with pytest.raises(UserError, match=f"^{re.escape(message)}"):
        source("synthetic", None, **kwargs)


def test_natural_partition_rejects_unknown_keys():
    from fedmoo import data
    from fedmoo.errors import UserError

    src = data.load_source({"name": "synthetic", "num_users": 4, "max_samples": 60}, ".")
    with pytest.raises(UserError, match=r"^partition.foo is not a hyperparameter of partition=natural; "):
        data.federate(src, {"name": "natural", "foo": 1}, 4)


def test_generated_in_place_gives_the_same_data():
    # digest of the data the generator made before it wrote into preallocated arrays
    # (per-user float64 draws concatenated, then .float()); same seed, same samples
    import hashlib

    src = generate(num_users=20, seed=1, max_samples=300)
    h = hashlib.sha256()
    for t in (src.x, src.y, src.is_test, src.owner):
        h.update(t.numpy().tobytes())
    assert src.x.shape == (2855, 60) and h.hexdigest()[:16] == "0a9d2548d4d6ebb7"


def test_natural_partition_of_interleaved_owners():
    from fedmoo.data.federated import Source

    owner = torch.tensor([2, 0, 1, 0, 2, 2, 1, 0, 3])
    is_test = torch.tensor([0, 0, 1, 1, 0, 1, 0, 0, 0], dtype=torch.bool)
    src = Source(x=torch.zeros(9, 2), y=torch.zeros(9, dtype=torch.long), is_test=is_test,
                 num_classes=2, input_shape=(2,), owner=owner)
    fed = federate(src, {"name": "natural", "seed": 0}, None)
    assert [fed.train.of(k).tolist() for k in range(4)] == [[1, 7], [6], [0, 4], [8]]
    assert [fed.test.of(k).tolist() for k in range(4)] == [[3], [2], [5], []]
