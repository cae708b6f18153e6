"""A round's local steps replayed from one CUDA graph (``engine.cuda_graph=true``).

A lockstep step launches about a hundred kernels; with few rows (K=10 clients of FedMGDA+'s CIFAR
CNN) the GPU waits on the launches: 2.6 ms a step on an H200 for 8 GFLOP (docs/PERFORMANCE.md,
GPU). Every step of a round has the same shapes and reads nothing on the host, so one step is
captured and replayed for the others, its minibatch indices, weights and learning rates copied
into the fixed tensors the graph reads. ``capture=False`` runs the same steps eagerly (the CPU
tests' path; the learning rate is then a per-row tensor on every step, so it agrees with the
plain loop to rounding). Per-task rounds do not use this path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from fedmoo.engine.common import gather, relabel
from fedmoo.engine.plan import RoundPlan
from fedmoo.errors import UserError

WARMUP = 3   # eager steps before the capture (PyTorch asks for a few on a side stream)


def run_steps(body: Callable[[], None], load: Callable[[int], None], steps: int,
              capture: bool, pool=None) -> None:
    """``load(s); body()`` for every step ``s``: with ``capture``, the steps after the first
    ``WARMUP`` replay one CUDA graph of ``body``, its memory from ``pool`` (a
    ``torch.cuda.graph_pool_handle()`` kept across rounds).

    The capture is begun directly rather than through ``torch.cuda.graph``, whose entry
    synchronises, runs Python's garbage collector and empties the caching allocator: once a
    round, that would cost more than the launches it saves."""
    if not capture or steps <= WARMUP:
        for s in range(steps):
            load(s)
            body()
        return
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(main)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):      # warm-up and capture off the default stream
        for s in range(WARMUP):
            load(s)
            body()
        graph.capture_begin(pool=pool)
        try:
            body()                     # recorded; nothing runs until a replay
        except Exception as e:         # noqa: BLE001 -- e.g. a host sync in the model's forward
            with contextlib.suppress(Exception):
                graph.capture_end()
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UserError("engine.cuda_graph=true: this model's step cannot be captured as a "
                            f"CUDA graph ({type(e).__name__}: {first}); run without it") from None
        graph.capture_end()
    main.wait_stream(side)
    for s in range(WARMUP, steps):
        load(s)
        graph.replay()


def train_steps_graphed(engine, plan: RoundPlan, stack, capture: bool) -> Tensor:
    """Every step of the round (``plan``: one row per stacked row) through the engine's
    program, reading its inputs from fixed tensors; ``stack`` (fedmoo.engine.stacked) brings the
    rows' update rule, label maps and loss factors. Returns the rows' losses over their last
    epoch ``[R]``."""
    data, rule = engine.data, stack.rule
    views, lr = rule.views, rule.lr
    total, dtype, device = plan.index.shape[0], views[0].dtype, views[0].device
    lr_plan = (lr if isinstance(lr, float) else lr.view(-1, 1)) * plan.active   # [R, S]
    idx, weight = plan.index[:, 0].clone(), plan.weight[:, 0].clone()
    step_lr, last = lr_plan[:, 0].clone(), plan.last[:, 0].clone()
    loss_after = torch.zeros(total, dtype=dtype, device=device)

    def load(s: int) -> None:
        idx.copy_(plan.index[:, s])
        weight.copy_(plan.weight[:, s])
        step_lr.copy_(lr_plan[:, s])
        last.copy_(plan.last[:, s])

    def body() -> None:
        x, y = gather(data.x, idx), relabel(stack.label_map, gather(data.y, idx))
        loss_after.add_(engine._step(replace(rule, lr=step_lr), x, y, weight, stack.scale) * last)

    if capture and engine.graph_pool is None:
        engine.graph_pool = torch.cuda.graph_pool_handle()
    run_steps(body, load, plan.steps, capture, engine.graph_pool)
    return loss_after
