"""The minibatch plan of one round for the whole cohort, as fixed-shape tensors.

The batches are exactly the sequential engine's: ``batch_layout`` with one generator, clients
drawn in cohort order. They are laid out as ``[K, S, B]`` (S = most steps of any client, B = the
largest batch), padded with the client's first sample at weight 0, so the batched engine runs S
identical steps with no data-dependent control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.engine.common import batch_layout


@dataclass
class RoundPlan:
    index: Tensor    # [K, S, B] int64 sample indices into the dataset tensors
    weight: Tensor   # [K, S, B] 1/b_{k,s} on the b_{k,s} real samples of a step, 0 on padding
    active: Tensor   # [K, S] 1 where client k takes step s, 0 after its last step
    last: Tensor     # [K, S] b_{k,s} / (samples in k's last epoch) on its last epoch's steps, else 0
    full: list[bool]  # per step: every client takes it (known on the host, no device read)

    @property
    def steps(self) -> int:
        return int(self.index.shape[1])

    def take(self, rows: Tensor) -> RoundPlan:
        """The plan of the rows ``rows`` (in that order, a row may repeat)."""
        return RoundPlan(index=self.index[rows], weight=self.weight[rows],
                         active=self.active[rows], last=self.last[rows], full=self.full)


def make_plan(client_ids: list[int], offsets: Tensor, sizes: Tensor, batch_size: int | None,
              epochs: int, local_steps: int | None, gen: torch.Generator, train_index: Tensor,
              dtype: torch.dtype) -> RoundPlan:
    """Build the plan on the host (once per round) and move it to ``train_index.device``.

    ``offsets`` / ``sizes`` are the train split's CSR offsets and client sizes on the CPU;
    ``train_index`` is the split's index tensor on the compute device.
    """
    layouts = [batch_layout(int(sizes[k]), batch_size, epochs, local_steps, gen)
               for k in client_ids]
    # every client's steps and samples laid end to end, then scattered into the padded arrays
    lens = np.concatenate([lens for _, lens, _ in layouts])             # per step
    epoch = np.concatenate([epoch for _, _, epoch in layouts])
    steps = np.array([lens.size for _, lens, _ in layouts])
    n_clients, n_steps, width = len(layouts), int(steps.max()), int(lens.max())
    client = np.repeat(np.arange(n_clients), steps)                     # per step
    step = np.arange(lens.size) - np.repeat(np.cumsum(steps) - steps, steps)
    start = np.asarray(offsets, dtype=np.int64)[np.asarray(client_ids, dtype=np.int64)]
    col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)  # per sample
    at = (np.repeat(client, lens), np.repeat(step, lens), col)

    # padding points at the client's first sample
    pos = np.repeat(start, n_steps * width).reshape(n_clients, n_steps, width)
    pos[at] = np.repeat(start[client], lens) + np.concatenate([p for p, _, _ in layouts])
    weight = np.zeros((n_clients, n_steps, width))
    weight[at] = np.repeat(1.0 / lens, lens)
    active = np.zeros((n_clients, n_steps))
    active[client, step] = 1.0
    in_last = epoch == epoch[np.cumsum(steps) - 1][client]              # the client's last epoch
    last_total = np.bincount(client, weights=lens * in_last, minlength=n_clients)
    last = np.zeros((n_clients, n_steps))
    last[client, step] = np.where(in_last, lens / last_total[client], 0.0)

    dev = train_index.device
    return RoundPlan(
        index=train_index[torch.from_numpy(pos).to(dev)],
        weight=torch.from_numpy(weight).to(device=dev, dtype=dtype),
        active=torch.from_numpy(active).to(device=dev, dtype=dtype),
        last=torch.from_numpy(last).to(device=dev, dtype=dtype),
        full=(active > 0).all(axis=0).tolist(),
    )


def stack_plans(plans: list[RoundPlan]) -> RoundPlan:
    """One plan whose rows are the rows of ``plans`` in order (several runs trained together,
    or Ditto's personal rows). Shorter plans are padded to the most steps and the widest batch
    as ``make_plan`` pads a client: the row's first sample at weight 0, steps with ``active`` 0."""
    steps = max(p.steps for p in plans)
    width = max(int(p.index.shape[2]) for p in plans)
    index, weight, active, last = [], [], [], []
    for p in plans:
        k, s, b = p.index.shape
        idx = p.index[:, :1, :1].expand(k, steps, width).clone()
        idx[:, :s, :b] = p.index
        index.append(idx)
        weight.append(F.pad(p.weight, (0, width - b, 0, steps - s)))
        active.append(F.pad(p.active, (0, steps - s)))
        last.append(F.pad(p.last, (0, steps - s)))
    full = [all(s < p.steps and p.full[s] for p in plans) for s in range(steps)]
    return RoundPlan(index=torch.cat(index), weight=torch.cat(weight), active=torch.cat(active),
                     last=torch.cat(last), full=full)


def longest_first(plan: RoundPlan, src: Tensor) -> tuple[RoundPlan, Tensor]:
    """The plan's rows reordered by their number of steps, most first (ties in order), and
    ``src`` (rows of a stack pointing at plan rows) renumbered to match. A row is active up to
    its last step, so at every step the active rows are then a prefix and a step can leave
    the finished rows out by slicing."""
    steps = plan.active.sum(1)
    order = torch.argsort(-steps, stable=True)
    return plan.take(order), torch.argsort(order)[src]
