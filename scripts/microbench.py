#!/usr/bin/env python
"""Micro-benchmarks behind the batched engine's layout decisions (docs/PERFORMANCE.md).

    python scripts/microbench.py          # about 40 s on a 2-core CPU

Each line times one kernel both ways on the MLP workload's shapes (K=10 clients, batch 10, the
3072 -> 200 first layer), the closed-form head's, MultiLeNet's, a checkpoint's and a lockstep
group's evaluation, and prints the median of 21 calls (11, 7, 3 or 201 for some) in milliseconds.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedmoo.engine import native  # noqa: E402
from fedmoo.engine.common import eval_chunk, gather  # noqa: E402
from fedmoo.engine.cpu_layout import fast_layout  # noqa: E402
from fedmoo.models.multitask import MultiLeNet  # noqa: E402

K, B, IN, OUT = 10, 10, 3072, 200


def ms(fn, reps: int = 21) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def line(what: str, a: tuple[str, float], b: tuple[str, float]) -> None:
    print(f"{what:<52} {a[0]} {a[1]:8.3f} ms | {b[0]} {b[1]:8.3f} ms | ratio {b[1] / a[1]:5.2f}")


def main() -> int:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(K, B, IN, generator=g)
    d = torch.randn(K, B, OUT, generator=g)
    w_t = torch.randn(K, IN, OUT, generator=g)                 # stored [in, out] (layout.py)
    w_c = w_t.transpose(1, 2).contiguous()                     # the module's own [out, in]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    line("forward h @ W: stored [in,out] vs [out,in] transposed",
         ("stored", ms(lambda: torch.bmm(h, w_t))), ("transposed", ms(lambda: torch.bmm(h, w_c.transpose(1, 2)))))
    flat = torch.randn(K, IN * OUT + 4096, generator=g)        # a row-major [R, d] block
    view = flat[:, :IN * OUT].view(K, IN, OUT)
    line("fused update baddbmm_: contiguous slot vs [R,d] view",
         ("slot", ms(lambda: w_t.baddbmm_(h.transpose(1, 2), d, alpha=-1e-3))),
         ("view", ms(lambda: view.baddbmm_(h.transpose(1, 2), d, alpha=-1e-3))))
    line("fused update vs materialised gradient + axpy",
         ("fused", ms(lambda: w_t.baddbmm_(h.transpose(1, 2), d, alpha=-1e-3))),
         ("two-pass", ms(lambda: w_t.add_(torch.bmm(h.transpose(1, 2), d), alpha=-1e-3))))
    line("read-modify-write of the weights vs fused update",
         ("w *= 1", ms(lambda: w_t.mul_(1.0))),
         ("fused", ms(lambda: w_t.baddbmm_(h.transpose(1, 2), d, alpha=-1e-3))))
    one = torch.randn(IN, OUT, generator=g)                    # packed once, [in, out]
    one_c = one.t().contiguous()                               # the flat vector's [out, in]
    line("pack the global weight into K rows: broadcast vs transposing",
         ("broadcast", ms(lambda: w_t.copy_(one.expand(K, IN, OUT)))),
         ("transposing", ms(lambda: w_t.copy_(one_c.t().expand(K, IN, OUT)))))
    data = torch.randn(44_000, 3, 32, 32, generator=g)
    idx = torch.randint(0, 40_000, (K, B), generator=g)
    line("minibatch gather: index_select vs x[idx]",
         ("index_select", ms(lambda: gather(data, idx))), ("x[idx]", ms(lambda: data[idx])))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(IN, OUT), torch.nn.ReLU(),
                              torch.nn.Linear(OUT, OUT), torch.nn.ReLU(), torch.nn.Linear(OUT, 10)).eval()
    samples = torch.randint(0, 40_000, (4000,), generator=g)

    def forward(chunk: int):
        with torch.no_grad():
            for s in range(0, samples.numel(), chunk):
                net(gather(data, samples[s:s + chunk]))

    line(f"eval pass of 4000 samples: chunk {eval_chunk(data)} (8 MB) vs 4096",
         ("8 MB", ms(lambda: forward(eval_chunk(data)), 7)), ("4096", ms(lambda: forward(4096), 7)))
    act = torch.randn(K * B, 64, 28, 28, generator=g)
    line("CNN per-sample ops on 100 images of 64x28x28",
         ("max_pool2d", ms(lambda: F.max_pool2d(act, 2), 7)),
         ("LRN(2)", ms(lambda: F.local_response_norm(act, 2), 7)))
    head(g)
    multilenet(g)
    checkpoints(g)
    return 0


def checkpoints(g: torch.Generator) -> None:
    """A FedMGDA+ run's checkpoint of the CIFAR CNN (797,962 weights; rows of 31 columns, as
    FedMGDA+ Table 8 writes them) with its first row and with 200 (2000 rounds, eval_every 10)."""
    import tempfile

    from fedmoo import algorithms
    from fedmoo.run import checkpoint

    state = algorithms.build({"name": "fedmgda_plus", "eta": 1.0}).init(
        torch.randn(797_962, generator=g), num_clients=100)
    row = {"round": 10, **{f"metric/{i}": 0.5 + i for i in range(30)}}
    rows = [{k: v + j for k, v in row.items()} for j in range(200)]   # distinct rows and values
    with tempfile.TemporaryDirectory() as d:
        line("FedMGDA+ checkpoint of the CIFAR CNN: 1 vs 200 rows",
             ("1 row", ms(lambda: checkpoint.save(Path(d), state, [row], {}, 1.0), 9)),
             ("200 rows", ms(lambda: checkpoint.save(Path(d), state, rows, {}, 1.0), 9)))


def head(g: torch.Generator) -> None:
    """The closed-form softmax regression's layout (fedmoo/engine/linear_head.py): Fashion-MNIST's
    head (10 clients, batch 10, 784 inputs + the bias column, 10 classes) and Adult's sweep (10
    sources x 20 rows, 2 classes)."""
    n, b, i, c = 10, 10, 785, 10
    h = torch.randn(n, b, i, generator=g)
    d = torch.randn(n, b, c, generator=g)
    w_io = torch.randn(n, i, c, generator=g)                  # [in, out]
    w_oi = w_io.transpose(1, 2).contiguous()                  # [out, in]: the round's layout
    line("head logits h @ W: [out,in] as transposed operand vs [in,out]",
         ("[out,in]", ms(lambda: torch.bmm(h, w_oi.transpose(1, 2)), 201)),
         ("[in,out]", ms(lambda: torch.bmm(h, w_io), 201)))
    line("head weight gradient: d^T h ([out,in]) vs h^T d ([in,out])",
         ("d^T h", ms(lambda: torch.bmm(d.transpose(1, 2), h), 201)),
         ("h^T d", ms(lambda: torch.bmm(h.transpose(1, 2), d), 201)))
    z = torch.randn(10, 10, 2, 20, generator=g)                # [sources, B, classes, rows]
    z_last = z.transpose(2, 3).contiguous()                   # classes innermost
    line("log_softmax over 2 classes: outer dimension vs innermost",
         ("outer", ms(lambda: torch.log_softmax(z, 2), 201)),
         ("innermost", ms(lambda: torch.log_softmax(z_last, -1), 201)))
    z1 = torch.randn(n, b, c, 1, generator=g)                 # one row per source (G = 1)
    line("log_softmax over 10 classes, G=1: [n,B,out,1] vs squeezed",
         ("dim 2", ms(lambda: torch.log_softmax(z1, 2), 201)),
         ("squeezed", ms(lambda: torch.log_softmax(z1.squeeze(3), 2).unsqueeze(3), 201)))


def multilenet(g: torch.Generator) -> None:
    """FMGDA's MultiFashion step (fedmoo/engine/cpu_layout.py, conv_pool.c): one chunk of 334
    canvases, forward and backward of a task's loss, on one thread as each row runs; torch's
    operators (channels-last, RowConv2d) against fedmoo's conv-pool-ReLU kernel."""
    if native.library() is None:
        print("MultiLeNet lines skipped: fedmoo's C kernel is not built (no C compiler?)")
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    x = torch.randn(334, 1, 28, 28, generator=g).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (334,), generator=g)
    net = fast_layout(MultiLeNet((1, 28, 28), 10, num_tasks=2), x)
    trunk = net.trunk

    def step():
        F.cross_entropy(net(x)[:, 0], y).backward()

    def block(m, inp):
        def run():
            m(inp).sum().backward()
        return run

    p1 = trunk.conv1(x).detach().requires_grad_()
    torch_ops = mock.patch.object(native, "library", lambda: None)
    for what, fn in [("MultiLeNet step, 334 canvases, 1 thread", step),
                     ("  its first block (1 -> 10 channels) fwd + bwd", block(trunk.conv1, x)),
                     ("  its second block (10 -> 20 channels) fwd + bwd", block(trunk.conv2, p1))]:
        with torch_ops:
            slow = ms(fn, 11)
        line(f"{what}: torch ops vs C kernel", ("torch", slow), ("kernel", ms(fn, 11)))
    torch.set_num_threads(threads)


if __name__ == "__main__":
    sys.exit(main())
