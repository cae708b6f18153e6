"""fedmoo's C kernel for conv -> 2x2 max-pool -> ReLU blocks (fedmoo.engine.native): the
same outputs and gradients as torch's operators (float64 to 1e-12; exactly on integer data,
where every sum is exact, so ties and zeros are checked bit for bit), NaN like torch, the
fallback to torch's operators, and the build (once per key, atomic, without a compiler)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedmoo.engine import native
from fedmoo.engine.cpu_layout import FastConvPoolReLU, RowConv2d
from fedmoo.errors import UserError
from fedmoo.models.cnn import ConvPoolReLU
from tests.engine.helpers import rel

needs_kernel = pytest.mark.skipif(native.library() is None, reason="no C compiler")


def pair(ci: int, c: int, k: int, dtype, bias: bool = True, seed: int = 0):
    """A torch-operator block and its fast copy with the same parameters."""
    torch.manual_seed(seed)
    ref = ConvPoolReLU(ci, c, k, bias=bias).to(dtype)
    fast = ConvPoolReLU(ci, c, k, bias=bias).to(dtype)
    fast.load_state_dict(ref.state_dict())
    fast.__class__ = FastConvPoolReLU
    return ref, fast


def run(block, x, g):
    """Output and gradients (weight, bias, input) of ``block`` on ``x`` for output gradient g."""
    x = x.detach().clone().requires_grad_(x.shape[1] > 1)
    out = block(x)
    inputs = [p for p in block.parameters()] + ([x] if x.requires_grad else [])
    return [out.detach(), *torch.autograd.grad(out, inputs, g)]


@needs_kernel
@pytest.mark.parametrize("ci,c,k,h,w,bias", [
    (1, 10, 5, 28, 28, True),     # MultiLeNet's first block on MultiFashion
    (10, 20, 5, 12, 12, True),    # its second block
    (1, 4, 5, 36, 33, True),      # 28 conv columns: vector groups and columns left over
    (1, 3, 3, 11, 20, False),     # odd conv output (9 x 18): the pool drops a row
    (3, 5, 3, 9, 10, True),
])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_block_equals_torch_operators(ci, c, k, h, w, bias, dtype, tol):
    ref, fast = pair(ci, c, k, dtype, bias)
    x = torch.randn(6, ci, h, w, dtype=dtype)
    assert native.fits(fast, x)
    want = run(ref, x, g := torch.randn_like(ref(x)))
    got = run(fast, x, g)
    assert got[0].shape == want[0].shape == (6, c, (h - k + 1) // 2, (w - k + 1) // 2)
    assert len(got) == len(want)
    assert all(rel(b, a) < tol for a, b in zip(want, got))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ci", [1, 3])
def test_ties_and_zeros_exactly_as_torch(dtype, ci):
    """Small integers: every sum is exact, so outputs and gradients must be equal bit for bit.
    Blank input regions make all four entries of a window equal (the first one wins) and
    negative windows give relu's zeros (no gradient)."""
    ref, fast = pair(ci, 4, 3, dtype)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in (ref, fast):
            m.weight.copy_(torch.randint(-2, 3, m.weight.shape, generator=gen.manual_seed(4)))
            m.bias.copy_(torch.tensor([0.0, 1.0, -1.0, 2.0]))
    x = torch.randint(-3, 4, (5, ci, 12, 13), generator=gen).to(dtype)
    x[:, :, 3:9, 2:10] = 0                                             # a blank region
    g = torch.randint(-5, 6, (5, 4, 5, 5), generator=gen).to(dtype)
    want, got = run(ref, x, g), run(fast, x, g)
    assert (want[0] == 0).any() and (want[0] > 0).any()
    assert all(torch.equal(a, b) for a, b in zip(want, got))


@needs_kernel
def test_nan_input_gives_nan_where_torch_does():
    """A NaN pixel makes every window whose convolution reads it NaN, like torch. Its
    gradient: torch's dense backward multiplies the NaN by the zero gradients of the windows'
    other entries and spreads NaN into the weight's gradient; the kernel sums the live maxima
    only, which never read it (the loss is NaN either way, so the run diverges the same)."""
    ref, fast = pair(1, 3, 3, torch.float64)
    x = torch.randn(2, 1, 10, 10, dtype=torch.float64)
    x[1, 0, 4, 5] = float("nan")
    a, b = ref(x), fast(x)
    assert a.isnan().any()
    torch.testing.assert_close(b, a, equal_nan=True, rtol=0, atol=1e-12)
    g = torch.ones_like(a)
    live = (a[0] > 0).nonzero()[0].tolist()          # sample 0: a window relu lets through
    g[(0, *live)] = float("nan")                     # a NaN gradient there reaches the weights
    wa = torch.autograd.grad(ref(x), ref.weight, g)[0]
    wb = torch.autograd.grad(fast(x), fast.weight, g)[0]
    c = live[0]
    assert wa.isnan().all()
    assert wb[c].isnan().all() and wb[torch.arange(3) != c].isfinite().all()


def test_without_the_library_the_fast_block_runs_torch_operators(monkeypatch):
    ref, fast = pair(1, 4, 5, torch.float64)
    monkeypatch.setattr(native, "library", lambda: None)
    x = torch.randn(3, 1, 16, 16, dtype=torch.float64)
    assert not native.fits(fast, x)
    assert RowConv2d.fits(fast)
    g = torch.randn_like(ref(x))
    assert all(rel(b, a) < 1e-13 for a, b in zip(run(ref, x, g), run(fast, x, g)))


@needs_kernel
def test_fits_only_plain_cpu_float_batches():
    _, fast = pair(1, 4, 3, torch.float64)
    assert native.fits(fast, torch.zeros(2, 1, 8, 8, dtype=torch.float64))
    assert not native.fits(fast, torch.zeros(1, 8, 8, dtype=torch.float64))   # unbatched
    assert not native.fits(fast, torch.zeros(2, 1, 8, 8))                     # other dtype
    assert not native.fits(fast, torch.zeros(2, 1, 3, 8, dtype=torch.float64))  # too small
    for kw in ({"stride": 2}, {"padding": 1}, {"dilation": 2}, {"groups": 2}):
        m = ConvPoolReLU(2, 4, 3, **kw).double()
        assert not native.fits(m, torch.zeros(2, 2, 9, 9, dtype=torch.float64)), kw


@pytest.fixture
def fresh_library(tmp_path, monkeypatch):
    """library() rebuilt under an empty cache folder (and forgotten afterwards)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native.library.cache_clear()
    yield tmp_path / "fedmoo" / "native"
    native.library.cache_clear()


@needs_kernel
def test_the_library_is_built_once_per_key(fresh_library):
    assert native.library() is not None
    [built] = fresh_library.glob("*/conv_pool.so")
    stamp = built.stat().st_mtime_ns
    native.library.cache_clear()
    assert native.library() is not None
    assert sorted(f.name for f in fresh_library.glob("*/*")) == [
        "build.lock", "conv_pool.so", "conv_pool.so.sha256"]
    assert built.stat().st_mtime_ns == stamp


def test_no_compiler_or_a_failed_build_falls_back_with_one_warning(fresh_library, monkeypatch,
                                                                   tmp_path, caplog):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert native.library() is None
    assert "no C compiler" in caplog.text
    broken = tmp_path / "broken-cc"
    broken.write_text("#!/bin/sh\necho 'conv_pool.c:1: error: boom' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    native.library.cache_clear()
    caplog.clear()
    assert native.library() is None
    assert "could not be built (conv_pool.c:1: error: boom)" in caplog.text
    assert not list(fresh_library.rglob("*.so*"))                     # nothing half-written
    monkeypatch.setenv("FEDMOO_NATIVE", "0")
    monkeypatch.delenv("CC")
    native.library.cache_clear()
    assert native.library() is None
    monkeypatch.setenv("FEDMOO_NATIVE", "off")           # neither 0 nor 1: one line
    native.library.cache_clear()
    with pytest.raises(UserError, match="FEDMOO_NATIVE=off: 0 .* or 1"):
        native.library()


@needs_kernel
def test_two_processes_building_at_once_both_load_one_library(tmp_path):
    script = ("import torch; from fedmoo.engine import native;"
              "from fedmoo.models.cnn import ConvPoolReLU;"
              "m = ConvPoolReLU(1, 2, 3); x = torch.randn(2, 1, 8, 8);"
              "assert native.library() is not None and native.fits(m, x);"
              "print(native.conv_pool_relu(m, x).shape)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(o.strip() == "torch.Size([2, 2, 3, 3])" for o, _ in outs)
    files = sorted(Path(tmp_path, "fedmoo", "native").rglob("*"))
    assert [f.name for f in files if f.is_file()] == ["build.lock", "conv_pool.so",
                                                      "conv_pool.so.sha256"]


LOAD = ("import torch; from fedmoo.engine import native;"
        "from fedmoo.models.cnn import ConvPoolReLU;"
        "m = ConvPoolReLU(1, 2, 3); x = torch.ones(2, 1, 8, 8);"
        "assert native.library() is not None and native.fits(m, x);"
        "print(native.conv_pool_relu(m, x).shape)")


@needs_kernel
@pytest.mark.parametrize("damage", ["truncated", "zeroed", "no digest"])
def test_a_damaged_cached_library_is_rebuilt_not_loaded(tmp_path, damage):
    # a truncated conv_pool.so once killed every FMGDA run with SIGBUS (exit 135) in dlopen
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    first = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    [lib] = Path(tmp_path, "fedmoo", "native").glob("*/conv_pool.so")
    good = lib.read_bytes()
    if damage == "truncated":
        lib.write_bytes(good[: len(good) // 2])
    elif damage == "zeroed":                       # same size, a page of zeros in the middle
        lib.write_bytes(good[:4096] + bytes(4096) + good[8192:])
    else:
        lib.with_name("conv_pool.so.sha256").unlink()
    again = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True)
    assert again.returncode == 0, (again.returncode, again.stderr)
    assert again.stdout.strip() == "torch.Size([2, 2, 3, 3])"
    assert "cached CPU kernels" in again.stderr and "rebuilding them" in again.stderr
    assert native._verified(lib)
