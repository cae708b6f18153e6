"""fedmoo's C kernels (``conv_pool.c``), compiled once per machine with the system's C compiler
(``-march=native``, cached per source, compiler and CPU) and loaded with ctypes: plain C compiles
in a second where torch's C++ extensions take a minute, and ctypes releases the GIL. A library is
written by a rename with its SHA-256 digest beside it and checked before loading (a truncated
copy would end the process with SIGBUS inside ``dlopen``). ``FEDMOO_NATIVE=0``, no compiler or a
failed build: one warning, and torch's operators run. docs/PERFORMANCE.md ("MultiLeNet's blocks
as one C kernel").

The kernel computes ``relu(max_pool2d(conv2d(x), 2))`` forward and backward for the fast layout
of MultiLeNet's blocks (``fedmoo.models.cnn.ConvPoolReLU``): only each pool window's maximum
carries gradient, so the backward pass is a quarter of a dense convolution's. Equal to torch's
operators up to the order of float sums (tests/engine/test_conv_pool.py: float64 to 1e-12, NaN
and ties included).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.data.cache import user_cache_dir
from fedmoo.errors import UserError
from fedmoo.models.cnn import ConvPoolReLU

SOURCE = Path(__file__).with_name("conv_pool.c")
FLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp-simd", "-std=c11", "-shared",
         "-fPIC"]
# C function -> (pointer arguments, size arguments, result), see conv_pool.c
SIGNATURES = {"conv1_pool_relu": (5, 5, None), "pool_relu": (3, 4, None),
              "conv_pool_relu_backward": (8, 8, ctypes.c_int)}
CL = torch.channels_last
_SUFFIX = {torch.float32: "_f32", torch.float64: "_f64"}
log = logging.getLogger(__name__)


def _cpu() -> str:
    """The CPU's model name and feature flags (Linux), else the machine type."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    keep = [ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
    return "\n".join(sorted(set(keep))) or platform.machine()


def _key(compiler: list[str]) -> str:
    blob = "\0".join([SOURCE.read_text(), *compiler, *FLAGS, _cpu(), platform.platform()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(target: Path) -> bool:
    """The library exists and matches the digest recorded when it was built."""
    record = target.with_name(target.name + ".sha256")
    try:
        return record.read_text().strip() == _digest(target)
    except OSError:
        return False


def _ensure(compiler: list[str], target: Path) -> None:
    """Build ``target`` unless a verified copy is there (a damaged one is rebuilt)."""
    if _verified(target):
        return
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / "build.lock"), timeout=600):
        if _verified(target):                     # another process built it meanwhile
            return
        if target.exists():
            log.warning("fedmoo's cached CPU kernels in %s are damaged or unverified; "
                        "rebuilding them", target)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
        os.close(fd)
        try:
            subprocess.run([*compiler, *FLAGS, "-o", tmp, str(SOURCE)], check=True,
                           capture_output=True, text=True, timeout=300)
            digest = _digest(Path(tmp))
            os.replace(tmp, target)
            Path(tmp).write_text(digest + "\n")     # the digest goes in last, also by a rename
            os.replace(tmp, target.with_name(target.name + ".sha256"))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels, built on first use; None when turned off or not buildable."""
    switch = os.environ.get("FEDMOO_NATIVE", "1")
    if switch not in ("0", "1"):
        raise UserError(f"FEDMOO_NATIVE={switch}: 0 (torch's operators) or 1 (the C kernel, the "
                        "default)")
    if switch == "0":
        return None
    compiler = shlex.split(os.environ.get("CC") or "cc")     # CC may carry arguments
    if not compiler or shutil.which(compiler[0]) is None:
        log.warning("no C compiler (CC=%s): fedmoo's CPU kernels are off, torch's operators "
                    "run instead (slower for MultiLeNet)", os.environ.get("CC") or "cc")
        return None
    root = user_cache_dir() or Path(tempfile.gettempdir()) / "fedmoo"
    target = root / "native" / _key(compiler) / "conv_pool.so"
    try:
        _ensure(compiler, target)
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError, TimeoutError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        log.warning("fedmoo's CPU kernels could not be built (%s); torch's operators run "
                    "instead", detail.strip().splitlines()[-1] if detail.strip() else e)
        return None
    for name, (pointers, sizes, result) in SIGNATURES.items():
        for suffix in ("_f32", "_f64"):
            fn = getattr(lib, name + suffix)
            fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_long] * sizes
            fn.restype = result
    return lib


def _ptr(t: Tensor | None) -> ctypes.c_void_p | None:
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _kernel(name: str, dtype: torch.dtype):
    return getattr(library(), name + _SUFFIX[dtype])


class _Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        x = x.contiguous(memory_format=CL)
        n, ci, h, w = x.shape
        c, k = weight.shape[0], weight.shape[-1]
        hp, wp = (h - k + 1) // 2, (w - k + 1) // 2
        out = torch.empty(n, c, hp, wp, dtype=x.dtype, memory_format=CL)
        arg = torch.empty(n, c, hp, wp, dtype=torch.uint8, memory_format=CL)
        if ci == 1:
            b = torch.zeros(c, dtype=x.dtype) if bias is None else bias.contiguous()
            _kernel("conv1_pool_relu", x.dtype)(_ptr(x), _ptr(weight.contiguous()), _ptr(b),
                                                _ptr(out), _ptr(arg), n, h, w, c, k)
        else:
            y = F.conv2d(x, weight, bias).contiguous(memory_format=CL)
            _kernel("pool_relu", x.dtype)(_ptr(y), _ptr(out), _ptr(arg), n, y.shape[2],
                                          y.shape[3], c)
        ctx.save_for_backward(x, weight, out, arg)
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight, out, arg = ctx.saved_tensors
        n, ci, h, w = x.shape
        c, k, hp, wp = weight.shape[0], weight.shape[-1], out.shape[2], out.shape[3]
        grad = grad.contiguous(memory_format=CL)
        w_cl = weight.permute(0, 2, 3, 1).contiguous()
        dw = torch.zeros_like(w_cl)
        db = torch.zeros(c, dtype=x.dtype)
        dx = torch.zeros_like(x, memory_format=CL) if ctx.needs_input_grad[0] else None
        if _kernel("conv_pool_relu_backward", x.dtype)(
                _ptr(grad), _ptr(out), _ptr(arg), _ptr(x), _ptr(w_cl), _ptr(dw), _ptr(db),
                _ptr(dx), n, h, w, ci, c, k, hp, wp):
            raise MemoryError("conv_pool_relu_backward: out of memory")
        return dx, dw.permute(0, 3, 1, 2).contiguous(), db if ctx.has_bias else None


def fits(m: ConvPoolReLU, x: Tensor) -> bool:
    """Whether the kernel runs ``m`` on ``x``: a CPU batch of float32/float64 images, a square
    kernel, stride 1, no padding or dilation, one group, and the library built."""
    k = m.kernel_size[0]
    return (x.device.type == "cpu" and x.dim() == 4 and x.dtype in _SUFFIX
            and m.weight.dtype == x.dtype and min(x.shape[2:]) >= k + 1
            and m.kernel_size[1] == k and m.groups == 1 and m.stride == (1, 1)
            and m.dilation == (1, 1) and not isinstance(m.padding, str)
            and m.padding == (0, 0) and library() is not None)


def conv_pool_relu(m: ConvPoolReLU, x: Tensor) -> Tensor:
    """``m(x)`` by the kernel (where ``fits(m, x)``)."""
    return _Block.apply(x, m.weight, m.bias)
