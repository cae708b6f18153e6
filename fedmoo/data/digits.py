"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, 0..16 scaled to [0, 1], 10
classes): no download. A stratified ``test_fraction`` of each class, drawn with ``split_seed``,
is the test split."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmoo.data.federated import Source


def load(data_dir: Path, *, test_fraction: float, split_seed: int) -> Source:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]           # [1797, 1, 8, 8]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(split_seed)
    is_test = np.zeros(len(y), bool)
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y == c))
        is_test[idx[: round(test_fraction * len(idx))]] = True
    return Source(x=x, y=y, is_test=is_test, num_classes=10, input_shape=(1, 8, 8),
                  class_names=[str(c) for c in range(10)],
                  location="scikit-learn's bundled copy (no files)")
