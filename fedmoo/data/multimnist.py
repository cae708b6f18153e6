"""MultiMNIST-style two-task image sets (Sener & Koltun, NeurIPS 2018), built from IDX files.

Each sample overlays two 28x28 images on a 36x36 canvas, the "left" at 0:28, the "right" at 6:34
(pixel-wise max), resized to 28x28 by PIL's nearest-neighbour rule; tasks L and R are their
labels. Every image of a split is a left image once, its partner drawn uniformly from the same
split with ``data.seed``. ``multimnist``: two MNIST digits; ``multifashion``: two Fashion-MNIST
images; ``multifashion_mnist``: an MNIST digit and a Fashion-MNIST image. ``train_samples`` /
``test_samples`` keep a seeded subset of left images.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmoo.data import pixels
from fedmoo.data.federated import Source
from fedmoo.data.mnist import load_arrays

CANVAS, SIDE, OFFSET = 36, 28, 6
TASKS = ["L", "R"]


def nearest_index(src: int, dst: int) -> np.ndarray:
    """Source index of each output pixel of a nearest-neighbour resize ``src -> dst``:
    ``floor((i + 0.5) * src / dst)`` in exact integer arithmetic (PIL NEAREST, torch nearest-exact)."""
    return ((2 * np.arange(dst) + 1) * src) // (2 * dst)


def compose(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Two uint8 image stacks ``[n, 28, 28]`` -> the resized canvases ``[n, 28, 28]`` (uint8)."""
    n = left.shape[0]
    canvas = np.zeros((n, CANVAS, CANVAS), dtype=np.uint8)
    canvas[:, :SIDE, :SIDE] = left
    part = canvas[:, OFFSET:OFFSET + SIDE, OFFSET:OFFSET + SIDE]
    np.maximum(part, right, out=part)
    idx = nearest_index(CANVAS, SIDE)
    return canvas[:, idx][:, :, idx]


def build(left, right, seed: int, train_samples: int | None, test_samples: int | None,
          normalize: str, location: str | None = None) -> Source:
    """``left`` / ``right``: (x, y, is_test) arrays of the two image families."""
    rng = np.random.default_rng(seed)
    xs, ys, flags = [], [], []
    for test, count in ((False, train_samples), (True, test_samples)):
        lx, ly = left[0][left[2] == test], left[1][left[2] == test]
        rx, ry = right[0][right[2] == test], right[1][right[2] == test]
        # every (kept) left image with a uniform random partner
        keep = np.arange(len(lx))
        if count is not None:
            keep = np.sort(rng.choice(len(lx), min(int(count), len(lx)), replace=False))
        partner = rng.integers(0, len(rx), size=len(lx))[keep]
        xs.append(compose(lx[keep], rx[partner]))
        ys.append(np.stack([ly[keep], ry[partner]], axis=1).astype(np.int64))
        flags.append(np.full(len(keep), test))
    x, is_test = np.concatenate(xs)[:, None], np.concatenate(flags)
    x = pixels.normalize(x, is_test, normalize, [0.1307], [0.3081])
    return Source(x=x, y=np.concatenate(ys), is_test=is_test, num_classes=10,
                  input_shape=(1, SIDE, SIDE), task="multitask", task_names=TASKS,
                  location=location)


def load_multimnist(data_dir: Path, *, seed: int, train_samples: int | None,
                    test_samples: int | None, normalize: str, download: bool) -> Source:
    mnist, _ = load_arrays(data_dir, "mnist", download)
    return build(mnist, mnist, seed, train_samples, test_samples, normalize)


def load_multifashion(data_dir: Path, *, seed: int, train_samples: int | None,
                      test_samples: int | None, normalize: str, download: bool,
                      system_dir: str | None) -> Source:
    fashion, src_dir = load_arrays(data_dir, "fmnist", download, system_dir)
    return build(fashion, fashion, seed, train_samples, test_samples, normalize, src_dir)


def load_multifashion_mnist(data_dir: Path, *, seed: int, train_samples: int | None,
                            test_samples: int | None, normalize: str, download: bool,
                            system_dir: str | None) -> Source:
    mnist, mnist_dir = load_arrays(data_dir, "mnist", download)
    fashion, fashion_dir = load_arrays(data_dir, "fmnist", download, system_dir)
    return build(mnist, fashion, seed, train_samples, test_samples, normalize,
                 f"{mnist_dir} and {fashion_dir}")
