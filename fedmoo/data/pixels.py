"""Pixel normalisation shared by the image loaders (``data.normalize``)."""

from __future__ import annotations

import numpy as np


def normalize(x: np.ndarray, is_test: np.ndarray, mode: str, mean=None, std=None) -> np.ndarray:
    """uint8 images ``[M, C, H, W]`` -> float32 array by ``mode`` (``data.normalize``): ``unit``
    ``x / 255``; ``standard`` ``(x / 255 - mean[c]) / std[c]`` (default: the training split's
    per-channel statistics); ``pixel_zscore`` every pixel position z-scored with the training
    split's raw mean and std, ``(x - mu) / (sigma + 0.001)`` (the q-FFL / FedFV FMNIST recipe)."""
    train = x[~is_test] if (~is_test).any() else x
    if mode == "unit":
        out = x.astype(np.float32) / 255.0
    elif mode == "standard":
        if mean is None or std is None:
            t = train.astype(np.float64) / 255.0
            mean, std = t.mean(axis=(0, 2, 3)), t.std(axis=(0, 2, 3))
        m = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
        s = np.asarray(std, np.float32).reshape(1, -1, 1, 1)
        out = (x.astype(np.float32) / 255.0 - m) / s
    else:
        t = train.astype(np.float64)
        mu, sigma = t.mean(axis=0), t.std(axis=0)
        out = (x.astype(np.float32) - mu.astype(np.float32)) / (sigma + 0.001).astype(np.float32)
    return np.ascontiguousarray(out, dtype=np.float32)
