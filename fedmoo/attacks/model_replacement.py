"""Model replacement / boosting (Bagdasaryan et al., AISTATS 2020; Bhagoji et al., ICML 2019).

The attacker submits ``w_adv = w_t + m (w_k - w_t)``: its pseudo-gradient boosted by m.
"""

from __future__ import annotations

from fedmoo.attacks.base import Attack, scale_rows
from fedmoo.config.hparams import attack as declared


class ModelReplacement(Attack):
    """The attacker sends ``m * g_k`` with ``g_k = w_t - w_k`` (losses honest).

    ``boost = null`` picks ``m = sum_j n_j / sum_a n_a`` over the cohort (a = attackers), the
    inverse of the attackers' share of FedAvg's sample weights: under FedAvg with near-zero honest
    updates the new global model is the attackers' mean local model (Bagdasaryan et al.'s gamma)."""

    name = "model_replacement"
    hp: declared.ModelReplacement

    def corrupt(self, cohort, rows, seed):
        factor = self.hp.boost
        if factor is None:
            n = cohort.num_samples.to(cohort.deltas.dtype)
            factor = float(n.sum() / n[rows].sum())
        return cohort.replace(deltas=scale_rows(cohort.deltas, rows, factor))
