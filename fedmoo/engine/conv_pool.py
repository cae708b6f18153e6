"""``relu(max_pool2d(conv2d(x), 2))`` forward and backward in one CPU kernel (``conv_pool.c``), for
the fast layout of MultiLeNet's blocks (``fedmoo.models.cnn.ConvPoolReLU``): only each pool
window's maximum carries gradient, so the backward pass is a quarter of a dense convolution's.
Equal to torch's operators up to the order of float sums (tests/engine/test_conv_pool.py: float64
to 1e-12, NaN and ties included); docs/PERFORMANCE.md ("MultiLeNet's blocks as one C kernel").
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import Tensor

from fedmoo.engine import native
from fedmoo.models.cnn import ConvPoolReLU

CL = torch.channels_last
_SUFFIX = {torch.float32: "_f32", torch.float64: "_f64"}


def _ptr(t: Tensor | None) -> ctypes.c_void_p | None:
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _kernel(name: str, dtype: torch.dtype):
    return getattr(native.library(), name + _SUFFIX[dtype])


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
            and m.padding == (0, 0) and native.library() is not None)


def conv_pool_relu(m: ConvPoolReLU, x: Tensor) -> Tensor:
    """``m(x)`` by the kernel (where ``fits(m, x)``)."""
    return _Block.apply(x, m.weight, m.bias)
