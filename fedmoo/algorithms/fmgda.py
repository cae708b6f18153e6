"""FMGDA and FSMGDA (Yang et al., "Federated Multi-Objective Learning", NeurIPS 2023): S tasks,
an objective indicator (which client holds which task), a shared-trunk multi-head model; the
clients train every task they hold separately and report ``[K, S, d]`` deltas."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.algorithms.base import Algorithm, mixing_weights
from fedmoo.config.hparams import algo as declared
from fedmoo.moo.minnorm import min_norm_tasks, task_average
from fedmoo.state import ClientSpec, GradientProbe, ServerState, TaskTraining

# The FMOL paper's Pareto-stationarity measure ||lambda_t^T grad F(x_t)||^2 (its Appendix A)
STATIONARITY = "train/lambda_grad_norm_sq"


@dataclass
class FMGDAState(ServerState):
    """``lam [S]`` float64: the last round's task weights (None before the first round)."""

    lam: Tensor | None = None


class FMGDA(Algorithm):
    """Federated multiple gradient descent averaging (paper Algorithm 1, full-batch option).

    Client i, for each task s it holds, from x_t: ``local_steps`` full-batch gradient steps
    ``x <- x - eta_L grad f_is(x)`` (eta_L = ``client.lr``), reporting
    ``Delta_is = (x_t - x_K) / eta_L`` on the trunk and head s. Server:
    ``Delta_s = mean of Delta_is over the participating clients holding s`` (a task no
    participating client holds is left out of the round), ``lam = argmin ||sum lam_s Delta_s||^2``
    on the simplex (on the trunk coordinates, or on all with ``qp_on: all``),
    ``x_{t+1} = x_t - eta sum_s lam_s Delta_s``. Logs ``server/lambda_task{s}`` and
    ``server/d_norm_sq`` (about K^2 times the paper's measure for small eta_L); on the evaluated
    rounds that are multiples of ``stationarity_every`` the run also logs the paper's
    Pareto-stationarity measure ``train/lambda_grad_norm_sq`` = ``||lam_t^T grad F(x_t)||^2``
    (``gradient_probe``).

    Single-task data is one objective held by every client: then, with ``eta = eta_L``, it is
    FedAvg with K local steps (``weighting`` as FedAvg's). With one client it is centralised MGD
    (FSMGDA: SMGD) run for K x T steps.
    """

    name = "fmgda"
    hp: declared.FMGDA
    reads_before = False           # its rule reads no loss_before / acc_before
    full_batch = True
    state_cls = FMGDAState

    def client_spec(self, state, client_ids):
        return ClientSpec(task_training=TaskTraining(self.hp.local_steps, self.full_batch))

    def step(self, state, cohort):
        deltas, mask = cohort.deltas, cohort.task_mask
        if deltas.dim() == 2:           # one objective: every client holds task 0
            deltas = deltas[:, None]
            mask = torch.ones(cohort.size, 1, dtype=torch.bool, device=deltas.device)
        means, present = task_average(deltas, mask, mixing_weights(cohort, self.hp.weighting))
        coords = cohort.shared if self.hp.qp_on == "trunk" and cohort.shared is not None else None
        lam, sol = min_norm_tasks(means, present, coords, self.hp.solver)
        d = lam.to(dtype=means.dtype, device=means.device) @ means
        diag = {"server/d_norm_sq": float(torch.linalg.vector_norm(d, dtype=torch.float64)) ** 2,
                "server/tasks_present": float(present.sum()),
                "server/qp_fallback": float(sol is not None and sol.method == "fallback")}
        diag.update({f"server/lambda_task{s}": float(v) for s, v in enumerate(lam.tolist())})
        return d, self.hp.eta, {"lam": lam}, diag

    def gradient_probe(self, state):
        every = self.hp.stationarity_every
        if state.lam is None or not every or state.round % every:
            return None
        return GradientProbe(STATIONARITY, state.lam, self.hp.weighting)


class FSMGDA(FMGDA):
    """FMGDA with minibatch local steps (``client.batch_size`` samples per step); on single-task
    data with ``eta = eta_L`` it is FedAvg with K local minibatch steps."""

    name = "fsmgda"
    full_batch = False
