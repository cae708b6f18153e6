"""Data and model shared by the ServerApp and the ClientApp: Synthetic(1, 1), logistic regression."""

from __future__ import annotations

import torch

from fedmoo.data.synthetic import DIM, NUM_CLASSES, generate


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(DIM, NUM_CLASSES)


def client_data(k: int, num_clients: int, data_seed: int, max_samples: int):
    """Client k's (x, y, x_test, y_test) of FedProx's Synthetic(1, 1) with num_clients users."""
    src = generate(num_users=num_clients, seed=data_seed, max_samples=max_samples)
    mine = src.owner == k
    train, test = mine & ~src.is_test, mine & src.is_test
    return src.x[train], src.y[train], src.x[test], src.y[test]
