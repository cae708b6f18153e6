#!/usr/bin/env python
"""Which products give a row the same bits whatever the rows beside it (docs/scaling.md).

    python scripts/batch_invariance.py

For the shapes of the papers' softmax regressions (Adult: batch 10, 100 inputs, 2 classes;
Fashion-MNIST: full batches of up to 5,600 images, 785 inputs, 10 classes; digits: 65 inputs)
it compares, bit for bit, against each entry computed alone on one thread:

- ``bmm`` entries in batches of 1 to 9 on 1 to 4 threads (the logits ``h W`` and the weight
  gradient ``d^T h``): what the default group arithmetic relies on;
- one wide GEMM for G rows, ``h [W_1 ... W_G]`` (the shared products fedmoo's groups do not
  use): whether a row's logits would depend on how many rows share its inputs;
- its transpose, the rows stacked along M, ``[W_1; ...; W_G] h^T`` and ``[D_1; ...; D_G] h``
  (the closed form's large steps, ``_tall`` in fedmoo/engine/linear_head.py), on 1 and 2
  threads, against the row beside a zero row on one thread, and for one sample (a GEMV).

It prints the cases that differ ("[]" where none does).
"""

from __future__ import annotations

import torch

SHAPES = {"adult": (10, 100, 2), "digits": (16, 65, 10), "fmnist": (5600, 785, 10),
          # FedFV Table 3's head: 3 classes, 785 inputs + the bias column. An entry's weight
          # gradient takes 3 x 786 floats (9,432 bytes, not a multiple of 64), so every second
          # entry's output is misaligned and MKL gives it other bits than alone
          "fedfv": (5600, 786, 3)}


def bmm_cases(b: int, nin: int, out: int) -> dict[str, list]:
    """(threads, batch) where a bmm entry differs from that entry alone on one thread."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(9, b, nin, generator=g)
    w = torch.randn(9, nin, out, generator=g)
    d = torch.randn(9, out, b, generator=g)
    torch.set_num_threads(1)                   # each entry alone, at its own address
    ref = {"logits": torch.cat([torch.bmm(h[i:i + 1], w[i:i + 1]) for i in range(9)]),
           "gradient": torch.cat([torch.bmm(d[i:i + 1], h[i:i + 1]) for i in range(9)])}
    bad: dict[str, list] = {"logits": [], "gradient": []}
    for t in (1, 2, 3, 4):
        torch.set_num_threads(t)
        for n in (1, 2, 3, 5, 9):
            got = {"logits": torch.bmm(h[:n], w[:n]), "gradient": torch.bmm(d[:n], h[:n])}
            for k in bad:
                if not torch.equal(got[k], ref[k][:n]):
                    bad[k].append((t, n))
    return bad


def wide_cases(b: int, nin: int, out: int) -> list[int]:
    """Numbers of rows G whose shared GEMM gives row 0 other logits than G = 1."""
    g = torch.Generator().manual_seed(1)
    h = torch.randn(b, nin, generator=g)
    w = torch.randn(20, nin, out, generator=g)
    torch.set_num_threads(1)
    ref = h @ w[0]
    return [n for n in (2, 3, 8, 13, 20)
            if not torch.equal((h @ w[:n].permute(1, 0, 2).reshape(nin, n * out))[:, :out], ref)]


def tall_cases(b: int, nin: int, out: int) -> list[tuple]:
    """(threads, G, what) where a row's products among G rows of its source stacked along M
    (at the start and at the end) differ from that row beside a zero row on one thread."""
    g = torch.Generator().manual_seed(2)
    h = torch.randn(b, nin, generator=g)
    w = torch.randn(40, out, nin, generator=g)
    d = torch.randn(40, out, b, generator=g)

    def both(lo: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        ws, ds = w[lo:lo + n], d[lo:lo + n]
        if n == 1:
            ws, ds = torch.cat([ws, torch.zeros_like(ws)]), torch.cat([ds, torch.zeros_like(ds)])
        return ((ws.reshape(-1, nin) @ h.t())[:n * out].view(n, out, b),
                (ds.reshape(-1, b) @ h)[:n * out].view(n, out, nin))

    torch.set_num_threads(1)
    ref = [torch.cat(parts) for parts in zip(*(both(i, 1) for i in range(40)))]
    bad = []
    for t in (1, 2):
        torch.set_num_threads(t)
        for n in (1, 2, 3, 12, 13, 40):
            for lo in {0, 40 - n}:
                for what, got, r in zip(("logits", "gradient"), both(lo, n), ref):
                    if not torch.equal(got, r[lo:lo + n]):
                        bad.append((t, n, what))
    return sorted(set(bad))


def main() -> int:
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads by default")
    for name, shape in SHAPES.items():
        print(f"{name} {shape}: bmm entries differ at (threads, batch) {bmm_cases(*shape)}; "
              f"a shared GEMM changes row 0 for G in {wide_cases(*shape)}; rows stacked along M "
              f"differ at (threads, G, product) {tall_cases(min(shape[0], 655), *shape[1:])}, "
              f"with one sample {tall_cases(1, *shape[1:])}", flush=True)
    torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
