"""The compiled CPU kernel of RMSNorm (``_rms_norm.c``): built on first use, cached, checked.

``functional.rms_norm`` calls ``rms_norm`` here for CPU tensors. The kernel reads each row once to
take its mean square and once more (from cache) to scale it; the backward likewise. It is plain C
with no torch headers, called through ctypes, in float32 (float16 / bfloat16 inputs are converted
to float32 and back: statistics in float32) or float64.

The build, the trusted cache and the fallback are ``layernorm._native_build``'s: when no library
can be had one warning per process says why and torch's ``rms_norm`` computes the same result,
slower; ``LAYERNORM_NATIVE=0`` selects that path without a warning.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from . import _native_build
from ._native_build import COMPILE_TIMEOUT, NativeKernelWarning, NativeUnavailable  # noqa: F401

# Inputs of at most this many values take torch.nn.functional.rms_norm (when dtypes agree): below it
# the ~0.1 ms of Python around a ctypes call costs more than the passes the kernel saves.
SMALL = 16384


def _declare(lib) -> None:
    L, D, i, p = ctypes.c_long, ctypes.c_double, ctypes.c_int, ctypes.c_void_p
    for suffix in ("f32", "f64"):
        fwd, bwd = getattr(lib, f"rms_forward_{suffix}"), getattr(lib, f"rms_backward_{suffix}")
        fwd.argtypes, fwd.restype = [L, L, D, i, p, p, p, p], None
        bwd.argtypes, bwd.restype = [L, L, i, p, p, p, p, p, p], i


KERNEL = _native_build.Kernel(
    stem="rms_norm", source=Path(__file__).with_name("_rms_norm.c"), what="the RMSNorm C kernel",
    fallback="Using torch ops instead (same results, slower)", declare=_declare)


def _target() -> tuple[str, Path]:
    """The compiler and the cached library's path for this source, compiler, flags and CPU."""
    cc = _native_build.compiler()
    if not cc:
        raise NativeUnavailable("no C compiler was found ($CC, cc, gcc, clang)")
    return cc, _native_build.cached_path(KERNEL, cc)


_LIBRARY = _native_build.Library(KERNEL)


def _build(cc: str, target: Path) -> None:
    _LIBRARY.build(cc, target, timeout=COMPILE_TIMEOUT)


def _verified(target: Path) -> bool:
    """The library is our verified build (see ``_native_build.problem``)."""
    return _native_build.problem(target) is None


def load():
    """The loaded library, or None (then use the torch-ops path; one warning says why)."""
    return _LIBRARY.get(timeout=COMPILE_TIMEOUT)


_reset_for_tests = _LIBRARY.reset


def eligible(x: torch.Tensor, weight: torch.Tensor | None) -> bool:
    """The kernel handles CPU tensors in eager (reverse-mode) autograd; scripting, tracing,
    torch.compile, torch.func transforms and forward-mode AD (which need torch ops they can see)
    take the torch-ops path."""
    if x.device.type != "cpu" or (weight is not None and weight.device.type != "cpu"):
        return False
    if torch.jit.is_scripting() or torch.jit.is_tracing() or torch.compiler.is_compiling():
        return False
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    if wrapped(x) or (weight is not None and wrapped(weight)):
        return False
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:  # forward-mode AD: torch ops
        return False
    return _native_build.enabled()


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def _kernels(dtype: torch.dtype):
    lib = load()
    suffix = "f64" if dtype == torch.float64 else "f32"
    return getattr(lib, f"rms_forward_{suffix}"), getattr(lib, f"rms_backward_{suffix}")


class _RMSNorm(torch.autograd.Function):
    """y = w * x * rstd over the rows of x (N, H), rstd = 1 / sqrt(mean(x^2) + eps); x and w
    contiguous, float32 or float64. The backward is differentiable (create_graph=True) through torch
    ops, so second derivatives are exact."""

    # forward(ctx, ...) rather than setup_context: apply() then skips binding the signature (tens of
    # microseconds a call); torch.func transforms take the torch-ops path anyway (``eligible``).
    @staticmethod
    def forward(ctx, x, weight, eps):
        n, h = x.shape
        y, rstd = torch.empty_like(x), torch.empty(n, dtype=x.dtype)
        forward, _ = _kernels(x.dtype)
        forward(n, h, eps, torch.get_num_threads(), _ptr(x), _ptr(weight), _ptr(y), _ptr(rstd))
        ctx.eps = eps
        ctx.mark_non_differentiable(rstd)
        ctx.save_for_backward(x, weight, rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, gy, _grstd):
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward autograd can differentiate again
            return (*_backward_torch(gy, x, weight, ctx.eps), None)
        gy = gy.contiguous()
        n, h = x.shape
        dx = torch.empty_like(x)
        dw = torch.empty_like(weight) if weight is not None and ctx.needs_input_grad[1] else None
        _, backward = _kernels(x.dtype)
        if backward(n, h, torch.get_num_threads(), _ptr(gy), _ptr(x), _ptr(weight), _ptr(rstd),
                    _ptr(dx), _ptr(dw)):
            raise MemoryError(f"RMSNorm backward could not allocate its {h}-value gain-gradient "
                              f"buffers. Free memory or use a smaller batch.")
        return dx, dw, None


def _backward_torch(gy, x, weight, eps):
    """The same gradients in torch ops: dx = r (gw - xhat mean(gw xhat)), dw = sum_rows g xhat."""
    rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    xhat = x * rstd
    gw = gy * weight if weight is not None else gy
    dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw = (gy * xhat).sum(0) if weight is not None else None
    return dx, dw


def rms_norm(x: torch.Tensor, h: int, weight: torch.Tensor | None, eps: float):
    """RMSNorm of x (..., H) over its last ``h`` values with the compiled kernel, in x's dtype
    (statistics in float32 for half types), or None when the kernel is not available."""
    if load() is None:
        return None
    cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    x2 = x.reshape(-1, h).to(cdtype).contiguous()
    w = None if weight is None else weight.reshape(h).to(cdtype).contiguous()
    y, _ = _RMSNorm.apply(x2, w, float(eps))
    return y.view(x.shape).to(x.dtype)
