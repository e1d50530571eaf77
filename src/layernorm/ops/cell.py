"""One LN-LSTM / LN-GRU step of the cells in one C call on the CPU (float32): the path of
``LSTMCell`` / ``GRUCell`` (and of the modules at T = 1) when the C kernels load.

A step is two GEMMs and then a few hundred units of layer norms and gates. torch computes the
GEMMs (xw = W_x x_t and hg = W_hh h_{t-1}, each (B, G), through ``F.linear``, so autograd
differentiates them as any linear layer; without autograd at batch 1 the C kernels'
``matvec_rows`` computes them); ``_rnn_steps.c``'s ``*_step_forward`` then runs the
rest of the step (every layer norm, the gates, c_t and h_t) in one pass over each row, where the
reference step in torch ops (``layernorm.recurrence``) spends a dozen dispatched ops. The
backward is one C call as well (``*_step_backward``: the gradients of xw, hg, the state and the
gains and biases). Its second derivatives (``create_graph=True``) differentiate the reference
step (``recurrence.lstm_from_terms`` / ``gru_from_terms``) instead, so every order is exact.

The recurrent regularizers (docs/rnn.md) of one step: ``h_mask`` (B, H), recurrent dropout,
enters the GEMM torch computes (W_hh (h * h_mask), so autograd carries its gradient);
``zone_h`` / ``zone_c`` (B, H), zoneout of this step (h_1 = z h_0 + (1 - z) h~_1), run in the C
step. The masks get no gradient.

``lib_for`` says when this path applies; elsewhere (other dtypes and devices, TorchScript,
tracing, torch.compile, dispatch or function modes and tensor subclasses, torch.func transforms,
forward-mode AD, no bias) the cells take the torch-ops step, which computes the same function.
"""
from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import recurrence
from ..functional import HALF_DTYPES as _HALF
from . import common, native
from .gemm import half_gemm_native
from .native import GRUArgs, LSTMArgs

_byref = ctypes.byref


def lib_for(x: Tensor):
    """The C kernels when they apply to a step on ``x`` (float32 CPU, or a half type on a CPU
    without native half GEMMs; ``native.eager_mode``, no torch.func transform, reverse-mode
    autograd), else None."""
    if not native.eager_mode(x) or torch._C._are_functorch_transforms_active() or \
            getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return None
    if x.dtype in _HALF:
        # float32 converts the weights at every step (~25 us for 64K values): measured faster
        # than the half-type torch ops from 2 rows up (bfloat16, I 64, H 128, 1 thread: 0.87x at
        # B = 2, 0.47x at B = 8), slower for one row, which keeps the torch ops
        if half_gemm_native(x.dtype) or x.shape[0] < 2:
            return None
        x = x.new_empty(0, dtype=torch.float32)
    return native.native_lib(x)


def _run(status: int, who: str) -> None:
    if status != 0:
        raise MemoryError(f"{who}: the C kernel could not allocate its per-thread workspace "
                          f"(status {status}). Use a smaller batch or fewer threads.")


def _p(t: Tensor) -> int:
    return t.data_ptr()


def _needs_graph(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _torch_ops_backward(*grads: Tensor) -> bool:
    """The backward differentiates the torch-ops step instead of calling C: for second order
    (``create_graph=True``) and for batched gradients (``is_grads_batched``, vmap: tensors
    without storage)."""
    return torch.is_grad_enabled() or torch._C._are_functorch_transforms_active() or \
        not all(torch._C._has_storage(g) for g in grads)


def _ptr(t: Tensor | None):
    """t's address, or None (NULL) for an absent tensor."""
    return None if t is None else t.data_ptr()


def _zones(who: str, x: Tensor, B: int, H: int, **zones) -> list:
    """The step's zoneout masks checked ((B, H), floating, x's device), detached, in x's dtype and
    contiguous (None stays None)."""
    found = []
    for name, z in zones.items():
        if z is not None:
            if not isinstance(z, Tensor) or tuple(z.shape) != (B, H) or \
                    not z.dtype.is_floating_point or z.device != x.device:
                got = (f"{z.dtype} of shape {tuple(z.shape)} on {z.device}"
                       if isinstance(z, Tensor) else type(z).__name__)
                raise ValueError(f"{who} expected {name} as a floating tensor of shape ({B}, {H}) "
                                 f"on {x.device} (the zoneout of this step), received {got}.")
            z = z.detach().to(x.dtype).contiguous()
        found.append(z)
    return found


def _after(t: Tensor, n: int) -> int:
    """The address of t[n:] (t flat and contiguous)."""
    return t.data_ptr() + n * t.element_size()


def _matvec(lib, x: Tensor, w: Tensor) -> Tensor:
    y = x.new_empty(x.shape[0], w.shape[0])
    lib.matvec_rows(x.shape[0], x.shape[1], _p(x), _p(w), w.shape[0], _p(y))
    return y


def _linear(lib, x: Tensor, w: Tensor) -> Tensor:
    """``F.linear(x, w)``, a step's product: without autograd at batch 1 (float32, contiguous)
    through the C kernels' ``matvec_rows`` (measured at (1, 256) x (256, 1024) plus (1, 128) x
    (128, 1024), one thread: 40 us against 55 for the two ``F.linear``), else ``F.linear`` (with
    autograd a Python backward for it measured slower than torch's own node)."""
    if x.shape[0] != 1 or not (x.is_contiguous() and w.is_contiguous()) or (
            torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
        return F.linear(x, w)  # (with autograd: torch's C++ node beats a Python backward)
    return _matvec(lib, x, w)


def _second_order(ctx, step, n_inputs, grads):
    """The backward as a differentiable function: ``step`` (the torch-ops step from the GEMMs'
    outputs) re-run on the saved inputs and differentiated."""
    eps = ctx.eps
    return tuple(common.differentiable_backward(lambda *xs: step(*xs, eps),
                                              ctx.saved_tensors[:n_inputs],
                                              ctx.needs_input_grad, grads))


# ---- LN-LSTM ----------------------------------------------------------------------------------

def _lstm_forward(lib, xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, save, h=None,
                  zone_h=None, zone_c=None):
    """-> h_1, c_1 (B, H) and, with ``save``, what the backward reads: cs (2, B, H) = [c_0; c_1],
    the activations (B, 4H), tanh(LN(c_1)) (B, H) and the statistics (6, 1, B). ``h`` (h_0) is
    read with ``zone_h`` only."""
    B, G = xw.shape
    H = G // 4
    h_new, c_new = xw.new_empty(B, H), xw.new_empty(B, H)
    if save:
        cs, act, tc, stats = (xw.new_empty(2, B, H), xw.new_empty(B, G), xw.new_empty(B, H),
                              xw.new_empty(6, 1, B))
        cs[0] = c
        kept = {"cs": _p(cs), "act_all": _p(act), "tc_all": _p(tc), "stats": _p(stats),
                "hg_all": _p(hg)}
    else:
        c_new.copy_(c)                      # updated in place by the kernel
        kept = {}
    args = LSTMArgs(T=1, B=B, H=H, nthreads=native.threads(B), eps=eps, xw=_p(xw),
                    gain_x=_p(g_ih), bias_x=_p(b_ih), gain_h=_p(g_hh), bias_h=_p(b_hh),
                    gain_c=_p(g_c), bias_c=_p(b_c), out=_p(h_new), h_n=_p(h_new),
                    c_n=_p(c_new), h0=_ptr(h), zone_h=_ptr(zone_h), zone_c=_ptr(zone_c), **kept)
    _run(lib.lstm_step_forward(_byref(args), _p(hg)), "LSTMCell")
    return h_new, c_new, ((cs, act, tc, stats) if save else None)


class _LSTMStep(torch.autograd.Function):
    """(xw, hg, c_0, gain_ih, bias_ih, gain_hh, bias_hh, gain_c, bias_c) -> (h_1, c_1), every
    tensor float32 and contiguous, ``lib`` the loaded C kernels; with zoneout also h_0 (for
    ``zone_h``) and the (B, H) zone_h, zone_c (no gradient)."""

    # forward(ctx, ...) rather than setup_context: apply() then skips binding the signature;
    # torch.func transforms take the torch-ops step (``lib_for``).
    @staticmethod
    def forward(ctx, xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, lib, h=None, zone_h=None,
                zone_c=None):
        h_new, c_new, saved = _lstm_forward(lib, xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c,
                                            eps, True, h, zone_h, zone_c)
        ctx.eps, ctx.lib, ctx.zones = eps, lib, (zone_h, zone_c)
        ctx.save_for_backward(xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, *saved, h)
        return h_new, c_new

    @staticmethod
    def backward(ctx, dh, dc):
        zone_h, zone_c = ctx.zones
        if _torch_ops_backward(dh, dc):
            if zone_h is None and zone_c is None:
                return _second_order(ctx, recurrence.lstm_from_terms, 9, (dh, dc))
            kept = ctx.saved_tensors

            def step(xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, _eps, _lib, h, *_):
                new = recurrence.lstm_from_terms(xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c,
                                                 ctx.eps)
                return recurrence.zone_update(new, (h, c), (zone_h, zone_c))
            return tuple(common.differentiable_backward(
                step, (*kept[:9], None, None, kept[13], None, None), ctx.needs_input_grad,
                (dh, dc)))
        xw, hg, _, g_ih, b_ih, g_hh, b_hh, g_c, b_c, cs, act, tc, stats, h = ctx.saved_tensors
        B, G = xw.shape
        H = G // 4
        dxg, dhg, dparams = xw.new_empty(B, G), xw.new_empty(B, G), xw.new_zeros(18 * H,
                                                                               dtype=torch.float64)
        dc = dc.contiguous().clone()        # in: of c_1; out: of c_0
        dh, zeros = dh.contiguous(), xw.new_zeros(B, H)   # kept alive through the call
        args = LSTMArgs(T=1, B=B, H=H, nthreads=native.threads(B), eps=ctx.eps, xw=_p(xw),
                        gain_x=_p(g_ih), bias_x=_p(b_ih), gain_h=_p(g_hh), bias_h=_p(b_hh),
                        gain_c=_p(g_c), bias_c=_p(b_c), grad_out=_p(zeros),
                        cs=_p(cs), hg_all=_p(hg), act_all=_p(act), tc_all=_p(tc),
                        stats=_p(stats), dh=_p(dh), dc=_p(dc), dxg=_p(dxg),
                        dhg=_p(dhg), dparams=_p(dparams), zone_h=_ptr(zone_h),
                        zone_c=_ptr(zone_c))
        direct = None if zone_h is None else xw.new_empty(B, H)  # d h_0 through the zoneout
        _run(ctx.lib.lstm_step_backward(_byref(args), _ptr(direct)), "LSTMCell backward")
        d_gh, d_bh, d_gc, d_bc, d_gx, d_bx = dparams.to(xw.dtype).split([G, G, H, H, G, G])
        return (dxg, dhg, dc, d_gx, d_bx, d_gh, d_bh, d_gc, d_bc, None, None, direct, None, None)


def lstm_step(lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, *,
              h_mask=None, zone_h=None, zone_c=None):
    """``recurrence.ln_lstm_step`` with the step after the GEMMs in C (CPU tensors of one dtype,
    ``lib_for``'s; biases present). ``h_mask`` (B, H): recurrent dropout, W_hh (h * h_mask);
    ``zone_h``, ``zone_c`` (B, H): zoneout of this step; None: off."""
    if x.dtype in _HALF:                     # in float32 (GEMMs and all), rounded once
        return _step_in_float32(lstm_step, x.dtype, lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh,
                                b_hh, g_c, b_c, eps, h_mask=h_mask, zone_h=zone_h,
                                zone_c=zone_c)
    zone_h, zone_c = _zones("LSTMCell", x, h.shape[0], h.shape[-1], zone_h=zone_h,
                            zone_c=zone_c)
    xw, c = _linear(lib, x, w_ih), c.contiguous()
    hg = _linear(lib, h if h_mask is None else h * h_mask.detach(), w_hh)
    hz = None if zone_h is None else h.contiguous()   # h_0, read by the zoneout of h
    g_ih, b_ih, g_hh, b_hh, g_c, b_c = (t.contiguous() for t in (g_ih, b_ih, g_hh, b_hh, g_c, b_c))
    if _needs_graph(xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, *(() if hz is None else (hz,))):
        if zone_h is None and zone_c is None:
            return _LSTMStep.apply(xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, lib)
        return _LSTMStep.apply(xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, lib, hz, zone_h,
                               zone_c)
    return _lstm_forward(lib, xw, hg, c, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, False, hz,
                         zone_h, zone_c)[:2]


# ---- LN-GRU -----------------------------------------------------------------------------------

def _gru_forward(lib, xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps, save, zone_h=None):
    """-> h_1 (B, H) and, with ``save``, the statistics (8, 1, B) the backward reads."""
    B, G = xw.shape
    H = G // 3
    h_new = xw.new_empty(B, H)
    stats = xw.new_empty(8, 1, B) if save else None
    kept = {"hg_all": _p(hg), "stats": _p(stats)} if save else {}
    args = GRUArgs(T=1, B=B, H=H, nthreads=native.threads(B), eps=eps, xw=_p(xw),
                   gain_x=_p(g_ih), bias_x=_p(b_ih), gain_h=_p(g_hh), bias_h=_p(b_hh),
                   gain_u=_after(g_hh, 2 * H), bias_u=_after(b_hh, 2 * H), h0=_p(h),
                   out=_p(h_new), h_n=_p(h_new), zone_h=_ptr(zone_h), **kept)
    _run(lib.gru_step_forward(_byref(args), _p(hg)), "GRUCell")
    return h_new, stats


def _gru_from_terms(xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps):
    parts = recurrence.gru_affine_parts(g_ih, b_ih, g_hh, b_hh)
    return recurrence.gru_from_terms(xw, hg, h, parts, eps)


class _GRUStep(torch.autograd.Function):
    """(xw, hg, h_0, gain_ih, bias_ih, gain_hh, bias_hh) -> h_1, as ``_LSTMStep`` (zone_h: the
    (B, H) zoneout, no gradient)."""

    @staticmethod
    def forward(ctx, xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps, lib, zone_h=None):
        h_new, stats = _gru_forward(lib, xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps, True, zone_h)
        ctx.eps, ctx.lib, ctx.zone_h = eps, lib, zone_h
        ctx.save_for_backward(xw, hg, h, g_ih, b_ih, g_hh, b_hh, stats)
        return h_new

    @staticmethod
    def backward(ctx, dh):
        zone_h = ctx.zone_h
        if _torch_ops_backward(dh):
            if zone_h is None:
                return _second_order(ctx, _gru_from_terms, 7, (dh,))

            def step(xw, hg, h, g_ih, b_ih, g_hh, b_hh, *_):
                new = _gru_from_terms(xw, hg, h, g_ih, b_ih, g_hh, b_hh, ctx.eps)
                return recurrence.zone_update((new,), (h,), (zone_h,))
            return tuple(common.differentiable_backward(
                step, (*ctx.saved_tensors[:7], None, None, None), ctx.needs_input_grad, (dh,)))
        xw, hg, h, g_ih, b_ih, g_hh, b_hh, stats = ctx.saved_tensors
        B, G = xw.shape
        H = G // 3
        dxg, dhg, direct = xw.new_empty(B, G), xw.new_empty(B, G), xw.new_empty(B, H)
        dparams = xw.new_zeros(12 * H, dtype=torch.float64)
        dh, zeros = dh.contiguous(), xw.new_zeros(B, H)   # kept alive through the call
        args = GRUArgs(T=1, B=B, H=H, nthreads=native.threads(B), eps=ctx.eps, xw=_p(xw),
                       gain_x=_p(g_ih), bias_x=_p(b_ih), gain_h=_p(g_hh), bias_h=_p(b_hh),
                       gain_u=_after(g_hh, 2 * H), bias_u=_after(b_hh, 2 * H),
                       grad_out=_p(zeros), h0=_p(h), hg_all=_p(hg),
                       stats=_p(stats), dh=_p(dh), dxg=_p(dxg), dhg=_p(dhg),
                       dparams=_p(dparams), zone_h=_ptr(zone_h))
        _run(ctx.lib.gru_step_backward(_byref(args), _p(direct)), "GRUCell backward")
        d_gh, d_bh, d_gu, d_bu, d_gx, d_bx = dparams.to(xw.dtype).split(
            [2 * H, 2 * H, H, H, G, G])
        return (dxg, dhg, direct, d_gx, d_bx, torch.cat([d_gh, d_gu]), torch.cat([d_bh, d_bu]),
                None, None, None)


def gru_step(lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, *, h_mask=None, zone_h=None,
             zone_c=None):
    """``recurrence.ln_gru_step`` with the step after the GEMMs in C (as ``lstm_step``;
    ``h_mask`` enters W_hh h only, the update z h_0 reads h_0; ``zone_c`` must be None)."""
    if zone_c is not None:
        raise ValueError("GRUCell has no cell state: zone_c must be None, received a tensor.")
    if x.dtype in _HALF:
        return _step_in_float32(gru_step, x.dtype, lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh,
                                eps, h_mask=h_mask, zone_h=zone_h)[0]
    (zone_h,) = _zones("GRUCell", x, h.shape[0], h.shape[-1], zone_h=zone_h)
    xw = _linear(lib, x, w_ih)
    hg = _linear(lib, h if h_mask is None else h * h_mask.detach(), w_hh)
    h = h.contiguous()
    g_ih, b_ih, g_hh, b_hh = (t.contiguous() for t in (g_ih, b_ih, g_hh, b_hh))
    if _needs_graph(xw, hg, h, g_ih, b_ih, g_hh, b_hh):
        if zone_h is None:
            return _GRUStep.apply(xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps, lib)
        return _GRUStep.apply(xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps, lib, zone_h)
    return _gru_forward(lib, xw, hg, h, g_ih, b_ih, g_hh, b_hh, eps, False, zone_h)[0]


def _step_in_float32(step, dtype, lib, *args, **masks):
    """A half-type step on a CPU without native half GEMMs (torch emulates them, several times
    slower than float32): every tensor converted to float32 (differentiably), the step in the
    float32 kernels, the new state rounded to ``dtype`` once -> a tuple of states."""
    *tensors, eps = args
    masks = {k: m.float() for k, m in masks.items() if m is not None}  # (only those given)
    out = step(lib, *(t.float() for t in tensors), eps, **masks)
    return tuple(o.to(dtype) for o in (out if isinstance(out, tuple) else (out,)))
