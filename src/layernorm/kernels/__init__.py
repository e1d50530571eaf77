"""Triton kernels for CUDA tensors: LayerNorm / RMSNorm and the LN-LSTM / LN-GRU recurrence.

Optional: importing this package never imports triton; the kernels' modules are imported on the
first call that runs one, which only happens for CUDA tensors (``pip install 'layernorm[gpu]'``).
CPU tensors keep the C kernels and torch ops; so does anything these kernels do not cover
(float64, torch.compile tracing).

* ``layer_norm`` / ``rms_norm``: layer norm (the paper's eq. 3, eps inside the square root) and
  RMSNorm over the trailing ``normalized_shape``, float32 statistics, forward and backward in
  Triton (``_norms``).
* ``ln_lstm_sequence`` / ``ln_gru_sequence``: the arguments and results of
  ``layernorm.rnn.fused.ln_lstm_sequence`` / ``ln_gru_sequence`` (docs/rnnfast.md); per step the
  recurrent GEMM through cuBLAS (``torch.mm``) and ONE Triton kernel for everything after it, in
  the forward and in the backward (``_rnn``).

``applies_rnn(x)`` / ``applies_norm(x)`` say whether a call with tensor ``x`` runs here.
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import warnings
from typing import Sequence

import torch

from .._autograd import differentiable_backward
from .reference import REFERENCE

__all__ = ["available", "applies_rnn", "applies_norm", "layer_norm", "rms_norm",
           "ln_lstm_sequence", "ln_gru_sequence", "sequence", "ENABLED", "NORMS"]

# Set to False to keep every CUDA call on the torch-ops paths.
ENABLED = True

# Which norms use the Triton kernel on CUDA. torch's own fused F.layer_norm is kept by default
# (its kernel is already one pass; ours runs when the gain's dtype differs from the input's,
# where the torch path is several ops); RMSNorm's torch path is not fused on older torch.
NORMS = {"layer_norm": False, "rms_norm": True}

_RUN_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # statistics in float32
_AVAILABLE: bool | None = None
_WARNED = False
# Tests set this to run the kernels over CPU tensors under TRITON_INTERPRET=1 (set before the
# first kernel call: triton reads it when the kernels' modules are imported).
_INTERPRET_CPU = False


def available() -> bool:
    """Whether triton imports here (checked once)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        ok = importlib.util.find_spec("triton") is not None
        if ok:
            try:
                import triton  # noqa: F401
            except Exception:  # noqa: BLE001 - a broken install means "not available"
                ok = False
        _AVAILABLE = ok
    return _AVAILABLE


def _device_ok(x: torch.Tensor) -> bool:
    return x.device.type == "cuda" or (_INTERPRET_CPU and x.device.type == "cpu")


def applies_rnn(x: torch.Tensor) -> bool:
    """Whether the LN-LSTM / LN-GRU recurrence with input term ``x`` runs in these kernels: a
    non-empty CUDA tensor of float32 / bfloat16 / float16, triton installed, not under
    torch.compile (float64 keeps the torch ops: the kernels compute in float32). A CUDA
    user without triton is told once that the slower loop of torch ops runs instead."""
    global _WARNED
    if not (ENABLED and _device_ok(x) and x.dtype in _RUN_DTYPES and x.numel() > 0):
        return False
    if torch.compiler.is_compiling():
        return False
    if not available():
        if not _WARNED:
            _WARNED = True
            warnings.warn("layernorm: triton is not installed, so the LN-LSTM / LN-GRU on CUDA "
                          "runs its time loop as torch ops (several times slower). Install it "
                          "with pip install 'layernorm[gpu]'.", RuntimeWarning, stacklevel=3)
        return False
    return True


def applies_norm(x: torch.Tensor, which: str, *params: torch.Tensor | None) -> bool:
    """Whether ``which`` ("layer_norm" / "rms_norm") of ``x`` runs in these kernels: a non-empty
    CUDA tensor of a supported dtype, triton installed, and the kernel selected in ``NORMS`` (or,
    for layer_norm, a gain/bias dtype different from x's, which torch's fused kernel rejects)."""
    if not (ENABLED and _device_ok(x) and x.dtype in _RUN_DTYPES and x.numel() > 0):
        return False
    if torch.compiler.is_compiling() or not available():
        return False
    if any(p is not None and (p.device != x.device or p.dtype not in _RUN_DTYPES)
           for p in params):
        return False
    mixed = any(p is not None and p.dtype != x.dtype for p in params)
    return NORMS.get(which, False) or (which == "layer_norm" and mixed)


def _on(x: torch.Tensor):
    """Triton launches on the current CUDA device: make it x's."""
    return torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# LayerNorm / RMSNorm
# ---------------------------------------------------------------------------------------------

class _NormFunction(torch.autograd.Function):
    """y = norm(x) * weight + bias over the last n units (x viewed as (rows, n)). Differentiable
    to any order: the backward is the Triton kernel, and under ``create_graph=True`` (a gradient
    that is differentiated again) the reference path's (``layernorm.functional.normalize``)."""

    @staticmethod
    def forward(ctx, x, weight, bias, n: int, eps: float, center: bool):
        from . import _norms
        x2 = x.contiguous().view(-1, n)
        w = None if weight is None else weight.contiguous().view(n)
        b = None if bias is None else bias.contiguous().view(n)
        with _on(x2):
            y, mean, rstd = _norms.norm_forward(x2, w, b, eps, center)
        ctx.save_for_backward(x2, w, mean, rstd, x, weight, bias)
        ctx.center, ctx.shape, ctx.n, ctx.eps = center, x.shape, n, eps
        ctx.params = [None if p is None else (p.shape, p.dtype) for p in (weight, bias)]
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        from . import _norms
        x2, w, mean, rstd, x, weight, bias = ctx.saved_tensors
        if torch.is_grad_enabled():     # create_graph=True: a backward autograd can differentiate
            return (*_norm_reference_grads(ctx, x, weight, bias, dy), None, None, None)
        with _on(x2):
            dx, dw, db = _norms.norm_backward(dy.contiguous().view(x2.shape), x2, w, mean, rstd,
                                              ctx.center)
        grads = [None if p is None else g.to(p[1]).view(p[0]) for g, p in zip((dw, db),
                                                                              ctx.params)]
        return dx.view(ctx.shape), *grads, None, None, None


def _norm_reference_grads(ctx, x, weight, bias, dy):
    """The gradients of x, weight, bias as differentiable functions of them and of dy: those of
    the readable normalization (``layernorm.functional.normalize``: the same math, statistics in
    float32 for half types, registered as ``REFERENCE["norm"]``) over the same (rows, n) view."""
    normalize = REFERENCE["norm"]
    n = ctx.n

    def reference(x_, w_, b_):
        return normalize(x_.reshape(-1, n), (-1,), eps=ctx.eps, center=ctx.center,
                         weight=None if w_ is None else w_.reshape(n),
                         bias=None if b_ is None else b_.reshape(n)).view(ctx.shape)
    return differentiable_backward(reference, (x, weight, bias), ctx.needs_input_grad[:3], (dy,))


def _norm(x, weight, bias, normalized_shape, eps, center):
    return _NormFunction.apply(x, weight, bias, math.prod(normalized_shape), eps, center)


def layer_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight=None, bias=None,
               eps: float = 1e-5) -> torch.Tensor:
    """Layer norm of x over its trailing ``normalized_shape`` (already checked by the caller),
    in Triton. Output in x's dtype; gradients for x, weight and bias."""
    return _norm(x, weight, bias, tuple(normalized_shape), eps, True)


def rms_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight=None,
             eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm of x over its trailing ``normalized_shape``, in Triton."""
    return _norm(x, weight, None, tuple(normalized_shape), eps, False)


# ---------------------------------------------------------------------------------------------
# LN-LSTM / LN-GRU
# ---------------------------------------------------------------------------------------------

def ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, lengths=None,
                     eps: float = 1e-5, gain_x=None, bias_x=None, *, h_mask=None, zone_h=None,
                     zone_c=None):
    """``layernorm.rnn.fused.ln_lstm_sequence`` on CUDA (same arguments, same results, the
    recurrent regularizers included; masks in the caller's batch order): returns out (T, B, H),
    h_n (B, H), c_n (B, H)."""
    from . import _rnn
    with _on(xg):
        return _rnn.ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, lengths,
                                     eps, gain_x, bias_x, h_mask=h_mask, zone_h=zone_h,
                                     zone_c=zone_c)


def ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths=None,
                    eps: float = 1e-5, gain_x=None, bias_x=None, *, h_mask=None, zone_h=None):
    """``layernorm.rnn.fused.ln_gru_sequence`` on CUDA: returns out (T, B, H), h_n (B, H)."""
    from . import _rnn
    with _on(xg):
        return _rnn.ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths, eps,
                                    gain_x, bias_x, h_mask=h_mask, zone_h=zone_h)


def sequence(cell: str, xg, states, params, order, batch_sizes, eps: float, gain_x, bias_x,
             masks: dict):
    """The Triton backend of ``layernorm.ops``' ``run_sequence``: ``cell`` ("ln_lstm_sequence"
    / "ln_gru_sequence") over the checked arguments, lengths as the one encoding the operators
    carry (``order`` and ``batch_sizes``, ``layernorm.recurrence.lengths``): the per-example
    lengths these kernels read are derived here, and nowhere else. ``masks``: the regularizers by
    name (None where off), in the caller's batch order."""
    from ..recurrence.lengths import to_lengths
    lengths = to_lengths(order, batch_sizes, xg.shape[1])
    given = {k: m for k, m in masks.items() if m is not None}
    run = ln_lstm_sequence if cell == "ln_lstm_sequence" else ln_gru_sequence
    return run(xg, *states, *params, lengths, eps, gain_x, bias_x, **given)
