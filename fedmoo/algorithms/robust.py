"""Byzantine-robust aggregators, baselines for attack experiments: coordinate-wise median and
trimmed mean (Yin, Chen, Ramchandran & Bartlett, ICML 2018), Krum and Multi-Krum (Blanchard,
El Mhamdi, Guerraoui & Stainer, NeurIPS 2017). Each replaces FedAvg's averaging; ``w <- w - d``."""

from __future__ import annotations

import torch

from fedmoo.algorithms.base import Algorithm
from fedmoo.config.hparams import algo as declared
from fedmoo.errors import UserError
from fedmoo.moo.gram import combine, gram


class Median(Algorithm):
    """Coordinate-wise median (mean of the two middle values for even K); FedAvg only for K <= 2."""

    name = "median"
    hp: declared.NoKnobs
    reads_before = False           # its rule reads no loss_before / acc_before

    def step(self, state, cohort):
        s = cohort.deltas.sort(dim=0).values
        k = cohort.size
        return 0.5 * (s[(k - 1) // 2] + s[k // 2]), 1.0, {}, {}


class TrimmedMean(Algorithm):
    """Coordinate-wise trimmed mean: drop the ``floor(beta K)`` largest and smallest values of every
    coordinate and average the rest. Reduces to uniform FedAvg whenever ``beta K < 1``."""

    name = "trimmed_mean"
    hp: declared.TrimmedMean
    reads_before = False           # its rule reads no loss_before / acc_before

    def step(self, state, cohort):
        k = cohort.size
        b = int(self.hp.beta * k)
        s = cohort.deltas.sort(dim=0).values
        return s[b : k - b].mean(0), 1.0, {}, {"server/trimmed": float(2 * b)}


class _KrumBase(Algorithm):
    reads_before = False           # its rule reads no loss_before / acc_before

    def check_run(self, num_clients, clients_per_round):
        if clients_per_round < 2 * self.hp.f + 3:
            raise UserError(
                f"algo={self.name} with algo.f={self.hp.f} needs clients_per_round >= 2f+3 = "
                f"{2 * self.hp.f + 3}, got {clients_per_round}; lower algo.f or raise clients_per_round"
            )

    def selection(self, cohort, count: int) -> torch.Tensor:
        """Indices ``[count]`` of the updates with the lowest Krum scores (ties: lowest index): an
        update's score is the sum of its squared distances to its ``K - f - 2`` nearest others."""
        g = gram(cohort.deltas)
        sq = g.diagonal()
        dist = (sq[:, None] + sq[None, :] - 2.0 * g).clamp_min(0.0)
        dist.fill_diagonal_(float("inf"))
        scores = dist.sort(dim=1).values[:, : cohort.size - self.hp.f - 2].sum(1)
        return torch.sort(scores, stable=True).indices[:count]


class Krum(_KrumBase):
    """Krum: apply the single update with the smallest Krum score, assuming ``f`` Byzantine clients
    per cohort (K >= 2f + 3). Never FedAvg (Multi-Krum with m = K is)."""

    name = "krum"
    hp: declared.Krum

    def step(self, state, cohort):
        i = int(self.selection(cohort, 1)[0])
        return cohort.deltas[i], 1.0, {}, {"server/krum_client": float(cohort.client_ids[i])}


class MultiKrum(_KrumBase):
    """Multi-Krum: uniform mean of the ``m`` (null: ``K - f``) updates with the smallest Krum scores.
    Reduces to uniform FedAvg when ``m = K``."""

    name = "multikrum"
    hp: declared.MultiKrum

    def check_run(self, num_clients, clients_per_round):
        super().check_run(num_clients, clients_per_round)
        if self.hp.m is not None and self.hp.m > clients_per_round:
            raise UserError(f"algo.m={self.hp.m} for multikrum is larger than clients_per_round="
                            f"{clients_per_round}; set algo.m<={clients_per_round} or null")

    def step(self, state, cohort):
        count = cohort.size - self.hp.f if self.hp.m is None else min(self.hp.m, cohort.size)
        pick = self.selection(cohort, count)
        uniform = torch.zeros(cohort.size, dtype=torch.float64)
        uniform[pick] = 1.0 / count
        return combine(uniform, cohort.deltas), 1.0, {}, {"server/selected": float(count)}
