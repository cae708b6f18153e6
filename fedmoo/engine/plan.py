"""The minibatch plan of one round for the whole cohort, as fixed-shape tensors.

The batches are exactly the sequential engine's: ``client_batches`` with one generator, clients
drawn in cohort order. They are laid out as ``[K, S, B]`` (S = most steps of any client, B = the
largest batch), padded with the client's first sample at weight 0, so the batched engine runs S
identical steps with no data-dependent control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedmoo.engine.common import client_batches


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


def make_plan(client_ids: list[int], offsets: Tensor, sizes: Tensor, batch_size: int | None,
              epochs: int, local_steps: int | None, gen: torch.Generator, train_index: Tensor,
              dtype: torch.dtype) -> RoundPlan:
    """Build the plan on the host (once per round) and move it to ``train_index.device``.

    ``offsets`` / ``sizes`` are the train split's CSR offsets and client sizes on the CPU;
    ``train_index`` is the split's index tensor on the compute device.
    """
    per_client = []
    for k in client_ids:
        batches = client_batches(int(sizes[k]), batch_size, epochs, local_steps, gen)
        lens = torch.tensor([p.numel() for _, p in batches])
        epoch = torch.tensor([e for e, _ in batches])
        per_client.append((k, lens, epoch, torch.cat([p for _, p in batches])))
    n_clients = len(per_client)
    n_steps = max(lens.numel() for _, lens, _, _ in per_client)
    width = max(int(lens.max()) for _, lens, _, _ in per_client)

    pos = torch.empty(n_clients, n_steps, width, dtype=torch.int64)
    weight = torch.zeros(n_clients, n_steps, width, dtype=torch.float64)
    active = torch.zeros(n_clients, n_steps, dtype=torch.float64)
    last = torch.zeros(n_clients, n_steps, dtype=torch.float64)
    for i, (k, lens, epoch, p) in enumerate(per_client):
        steps = lens.numel()
        row = torch.repeat_interleave(torch.arange(steps), lens)
        col = torch.arange(p.numel()) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        start = int(offsets[k])
        pos[i].fill_(start)
        pos[i, row, col] = start + p
        weight[i, row, col] = (1.0 / lens.double())[row]
        active[i, :steps] = 1.0
        in_last = epoch == epoch[-1]
        last[i, :steps] = torch.where(in_last, lens.double() / lens[in_last].sum(), 0.0)

    dev = train_index.device
    return RoundPlan(
        index=train_index[pos.to(dev)],
        weight=weight.to(device=dev, dtype=dtype),
        active=active.to(device=dev, dtype=dtype),
        last=last.to(device=dev, dtype=dtype),
        full=(active > 0).all(dim=0).tolist(),
    )
