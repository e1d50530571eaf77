"""One LN-LSTM / LN-GRU step of the cells as one autograd node over C on the CPU (float32): the
path of ``LSTMCell`` / ``GRUCell`` (and of the modules at T = 1) when the C kernels load.

A step is two products (xw = W_x x_t and hg = W_hh h_{t-1}, each (B, G)) and then a few hundred
units of layer norms and gates. One ``autograd.Function`` takes the step's inputs and weights:
its forward computes the products (torch's GEMM; at one row, where they are matrix-vector
products, the C kernels' ``matvec_rows`` inside the same C call as the rest, ``*_cell_forward``)
and ``_rnn_steps.c``'s step runs every layer norm, the gates, c_t and h_t in one pass over each
row, where the reference step in torch ops (``layernorm.recurrence``) spends a dozen dispatched
ops and a graph node each. The backward is one C call (``*_step_backward``: the gradients of xw,
hg, the state and the gains and biases) and the four products of the weights' and inputs'
gradients. Its second derivatives (``create_graph=True``) differentiate the reference step
(``recurrence.ln_lstm_step`` / ``ln_gru_step``, then ``recurrence.zone_update``) instead, so every
order is exact.

The recurrent regularizers (docs/rnn.md) of one step: ``h_mask`` (B, H), recurrent dropout,
enters the recurrent product (W_hh (h * h_mask)); ``zone_h`` / ``zone_c`` (B, H), zoneout of this
step (h_1 = z h_0 + (1 - z) h~_1), run in the C step. The masks get no gradient.

The cells' entries ``lstm_cell`` / ``gru_cell`` / ``rnn_cell`` / ``torch_cell`` choose, once per
call (``native.where``, ``Where.cell``): the C step where it applies; elsewhere (other dtypes and
devices, TorchScript, tracing, torch.compile, dispatch or function modes and tensor subclasses,
torch.func transforms, forward-mode AD, no bias) the torch-ops step, which computes the same
function; under autocast None, and the cell runs its readable step (autocast's casts), except
``torch_cell``, which runs torch's own op under autocast as torch's cells do.
"""
from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from .. import recurrence
from ..functional import HALF_DTYPES as _HALF
from . import common, native
from .native import GRUArgs, LSTMArgs

_byref = ctypes.byref


def _run(status: int, who: str) -> None:
    if status != 0:
        raise MemoryError(f"{who}: the C kernel could not allocate its per-thread workspace "
                          f"(status {status}). Use a smaller batch or fewer threads.")


def _p(t: Tensor) -> int:
    return t.data_ptr()


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


_ARGS: dict = {}          # (struct, B, H, eps, threads, gains' and biases' addresses) -> filled


def _args(cls, B: int, H: int, eps: float, *affine: Tensor):
    """A fresh ``cls`` (LSTMArgs / GRUArgs) for one step (T = 1) with its sizes and the gains' and
    biases' addresses (``_AFFINE[cls]``'s fields; the GRU's gain_u, bias_u: the candidate's part
    of gain_hh, bias_hh) filled in: a copy of one kept per key, the key being every value it
    holds, so it is right whatever the tensors are now (an in-place update changes no address; a
    new tensor is a new key)."""
    n = native.threads(B)
    at = [t.data_ptr() for t in affine]
    if cls is GRUArgs:
        at += [at[2] + 2 * H * _F, at[3] + 2 * H * _F]
    key = (cls, B, H, eps, n, *at)
    kept = _ARGS.get(key)
    if kept is None:
        if len(_ARGS) > 256:
            _ARGS.clear()
        kept = _ARGS[key] = cls(T=1, B=B, H=H, nthreads=n, eps=eps, **dict(zip(_AFFINE[cls], at)))
    return cls.from_buffer_copy(kept)


_AFFINE = {LSTMArgs: ("gain_x", "bias_x", "gain_h", "bias_h", "gain_c", "bias_c"),
           GRUArgs: ("gain_x", "bias_x", "gain_h", "bias_h", "gain_u", "bias_u")}

_ZEROS = [torch.zeros(0, dtype=torch.float32, device="cpu")]
_F = 4                    # bytes per float32: the steps' tensors'

# ONE_CALL: at one row the products are matrix-vector products, and the step is one C call with
# them (``*_cell_forward``: matvec_rows, each weight read once in torch's layout); more rows take
# torch's GEMM, then the step in C.


def _zeros(n: int) -> Tensor:
    """At least n float32 zeros the kernels only read (the backward's grad_out), kept from call
    to call; the caller holds the tensor through its C call (another thread may replace it)."""
    z = _ZEROS[0]
    if z.numel() < n:
        z = _ZEROS[0] = torch.zeros(max(n, 2 * z.numel()), dtype=torch.float32, device="cpu")
    return z


def _products(x: Tensor, hm: Tensor, w_ih: Tensor, w_hh: Tensor, saved: Tensor | None):
    """xw = x W_x^T, hg = hm W_h^T (B, G) by torch's GEMM, into the first 2 B G values of
    ``saved`` when the backward reads them."""
    if saved is None:
        return torch.mm(x, w_ih.t()), torch.mm(hm, w_hh.t())
    B, G = x.shape[0], w_ih.shape[0]
    xw, hg = saved[:2 * B * G].view(2, B, G).unbind()
    return torch.mm(x, w_ih.t(), out=xw), torch.mm(hm, w_hh.t(), out=hg)


def _masked(h: Tensor, h_mask: Tensor | None) -> Tensor:
    """The input of W_hh: h_{t-1}, times the recurrent-dropout mask."""
    return h if h_mask is None else (h * h_mask).contiguous()


def _grads(need, x, h, w_ih, w_hh, h_mask, dxg, dhg, direct=None):
    """The gradients of x, h, W_x, W_h (``need``: which, in that order) from those of the
    products (dxg, dhg: (B, G)) and, for h, its ``direct`` part that does not pass through W_h
    (None: none); None where not needed."""
    dx = torch.mm(dxg, w_ih) if need[0] else None
    dh = None
    if need[1]:
        if h_mask is None:
            dh = torch.mm(dhg, w_hh) if direct is None else torch.addmm(direct, dhg, w_hh)
        else:
            dh = torch.mm(dhg, w_hh).mul_(h_mask)
            dh = dh if direct is None else dh.add_(direct)
    return dx, dh, (torch.mm(dxg.t(), x) if need[2] else None), (
        torch.mm(dhg.t(), _masked(h, h_mask)) if need[3] else None)


def _reference_backward(ctx, step, n: int, grads):
    """The backward as a differentiable function: ``step`` (the reference step over the same
    inputs as the forward: the n tensors saved first, then ``how``) re-run on the saved inputs
    and differentiated."""
    inputs = (*ctx.saved_tensors[:n], ctx.how)
    return tuple(common.differentiable_backward(step, inputs, ctx.needs_input_grad, grads))


# ---- LN-LSTM ----------------------------------------------------------------------------------

def _lstm_forward(lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, save,
                  h_mask=None, zone_h=None, zone_c=None):
    """-> h_1, c_1 (B, H) and, with ``save``, the one float32 tensor the backward reads:
    [xw; hg] (2, B, G), cs (2, B, H) = [c_0; c_1], the activations (B, G), tanh(LN(c_1)) (B, H)
    and the statistics (6, 1, B), flat in that order (else None)."""
    B, G = x.shape[0], w_ih.shape[0]
    H = G // 4
    hm = _masked(h, h_mask)
    h_new, c_new = x.new_empty(B, H), x.new_empty(B, H)
    args = _args(LSTMArgs, B, H, eps, g_ih, b_ih, g_hh, b_hh, g_c, b_c)
    args.out = args.h_n = _p(h_new)
    args.c_n = _p(c_new)
    if zone_h is not None or zone_c is not None:
        args.h0, args.zone_h, args.zone_c = _p(h), _ptr(zone_h), _ptr(zone_c)
    saved = x.new_empty(B * (3 * G + 3 * H + 6)) if save else None
    xw, hg = _lstm_saved(args, saved, B, H) if save else (None, None)
    if B == 1:                               # one C call, the products too (ONE_CALL)
        args.I, args.nthreads = x.shape[1], torch.get_num_threads()   # the products' threads
        _run(lib.lstm_cell_forward(_byref(args), xw, hg, _p(x), _p(w_ih), _p(hm), _p(w_hh),
                                   _p(c)), "LSTMCell")
    else:
        xw_t, hg_t = _products(x, hm, w_ih, w_hh, saved)
        if save:
            saved[2 * B * G:2 * B * G + B * H].copy_(c.view(-1))
            args.hg_all = _p(hg_t)
        else:
            c_new.copy_(c)                  # updated in place by the kernel
        args.xw = _p(xw_t)
        _run(lib.lstm_step_forward(_byref(args), _p(hg_t)), "LSTMCell")
    return h_new, c_new, saved


def _lstm_saved(args, saved: Tensor, B: int, H: int) -> tuple:
    """``args`` pointed at the parts of ``saved`` (``_lstm_forward``'s layout) -> the addresses
    of xw and hg, its first two."""
    G = 4 * H
    xw = _p(saved)
    hg = xw + B * G * _F
    args.cs = hg + B * G * _F
    args.act_all = args.cs + 2 * B * H * _F
    args.tc_all = args.act_all + B * G * _F
    args.stats = args.tc_all + B * H * _F
    return xw, hg


def _lstm_reference(x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, how):
    """The step ``_LSTMStep`` computes, in the reference's torch ops (its second order)."""
    eps, _, h_mask, zone_h, zone_c = how
    new = recurrence.ln_lstm_step(x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps,
                                  h_mask)
    return recurrence.zone_update(new, (h, c), (zone_h, zone_c))


class _LSTMStep(torch.autograd.Function):
    """(x, h_0, c_0, W_x, W_h, gain_ih, bias_ih, gain_hh, bias_hh, gain_c, bias_c, how) ->
    (h_1, c_1): the whole step, its two products included, every tensor float32 and contiguous;
    ``how`` = (eps, the loaded C kernels, h_mask, zone_h, zone_c), the masks (B, H) or None, no
    gradient (one argument: ``apply`` costs per argument)."""

    # forward(ctx, ...) rather than setup_context: apply() then skips binding the signature;
    # torch.func transforms take the torch-ops step (``native.Where.cell``).
    @staticmethod
    def forward(ctx, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, how):
        eps, lib, h_mask, zone_h, zone_c = ctx.how = how
        h_new, c_new, saved = _lstm_forward(lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh,
                                            g_c, b_c, eps, True, h_mask, zone_h, zone_c)
        ctx.save_for_backward(x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, saved)
        return h_new, c_new

    @staticmethod
    def backward(ctx, dh, dc):
        if _torch_ops_backward(dh, dc):
            return _reference_backward(ctx, _lstm_reference, 11, (dh, dc))
        x, h, _, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, saved = ctx.saved_tensors
        eps, lib, h_mask, zone_h, zone_c = ctx.how
        B, G = x.shape[0], w_ih.shape[0]
        H = G // 4
        dxg, dhg = x.new_empty(2, B, G).unbind()
        dparams = x.new_zeros(18 * H, dtype=torch.float64)
        dc = dc.contiguous().clone()        # in: of c_1; out: of c_0
        dh = dh.contiguous()
        args = _args(LSTMArgs, B, H, eps, g_ih, b_ih, g_hh, b_hh, g_c, b_c)
        args.xw, args.hg_all = _lstm_saved(args, saved, B, H)
        zeros = _zeros(B * H)
        args.grad_out, args.dh, args.dc = _p(zeros), _p(dh), _p(dc)
        args.dxg, args.dhg, args.dparams = _p(dxg), _p(dhg), _p(dparams)
        direct = None
        if zone_h is not None or zone_c is not None:
            args.zone_h, args.zone_c = _ptr(zone_h), _ptr(zone_c)
            direct = None if zone_h is None else x.new_empty(B, H)  # d h_0 through the zoneout
        _run(lib.lstm_step_backward(_byref(args), _ptr(direct)), "LSTMCell backward")
        d_gh, d_bh, d_gc, d_bc, d_gx, d_bx = dparams.to(x.dtype).split([G, G, H, H, G, G])
        need = ctx.needs_input_grad
        dx, dh0, dw_ih, dw_hh = _grads((*need[:2], *need[3:5]), x, h, w_ih, w_hh, h_mask, dxg,
                                       dhg, direct)
        return dx, dh0, dc, dw_ih, dw_hh, d_gx, d_bx, d_gh, d_bh, d_gc, d_bc, None


def lstm_step(lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps, *,
              h_mask=None, zone_h=None, zone_c=None):
    """``recurrence.ln_lstm_step`` (and the zoneout after it) as one C step (CPU tensors of one
    dtype, ``native.Where.cell``'s; biases present). ``h_mask`` (B, H): recurrent dropout, W_hh (h *
    h_mask); ``zone_h``, ``zone_c`` (B, H): zoneout of this step; None: off."""
    if x.dtype in _HALF:                     # in float32 (GEMMs and all), rounded once
        return _step_in_float32(lstm_step, x.dtype, lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh,
                                b_hh, g_c, b_c, eps, h_mask=h_mask, zone_h=zone_h,
                                zone_c=zone_c)
    if zone_h is not None or zone_c is not None:
        zone_h, zone_c = _zones("LSTMCell", x, h.shape[0], h.shape[-1], zone_h=zone_h,
                                zone_c=zone_c)
    if h_mask is not None:
        h_mask = h_mask.detach().to(x.dtype)    # (the product reads h * h_mask as float32)
    tensors = tuple(t.contiguous() for t in (x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c,
                                             b_c))
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _LSTMStep.apply(*tensors, (eps, lib, h_mask, zone_h, zone_c))
    return _lstm_forward(lib, *tensors, eps, False, h_mask, zone_h, zone_c)[:2]


# ---- LN-GRU -----------------------------------------------------------------------------------

def _gru_forward(lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, save, h_mask=None,
                 zone_h=None):
    """-> h_1 (B, H) and, with ``save``, the one float32 tensor the backward reads: [xw; hg]
    (2, B, G) and the statistics (8, 1, B), flat (else None)."""
    B, G = x.shape[0], w_ih.shape[0]
    H = G // 3
    hm = _masked(h, h_mask)
    h_new = x.new_empty(B, H)
    args = _args(GRUArgs, B, H, eps, g_ih, b_ih, g_hh, b_hh)
    args.h0, args.out = _p(h), _p(h_new)
    args.h_n = args.out
    if zone_h is not None:
        args.zone_h = _p(zone_h)
    saved = x.new_empty(B * (2 * G + 8)) if save else None
    xw, hg = _gru_saved(args, saved, B, H) if save else (None, None)
    if B == 1:                               # one C call, the products too (ONE_CALL)
        args.I, args.nthreads = x.shape[1], torch.get_num_threads()
        _run(lib.gru_cell_forward(_byref(args), xw, hg, _p(x), _p(w_ih), _p(hm), _p(w_hh)),
             "GRUCell")
    else:
        xw_t, hg_t = _products(x, hm, w_ih, w_hh, saved)
        args.xw = _p(xw_t)
        _run(lib.gru_step_forward(_byref(args), _p(hg_t)), "GRUCell")
    return h_new, saved


def _gru_saved(args, saved: Tensor, B: int, H: int) -> tuple:
    """``args`` pointed at the parts of ``saved`` (``_gru_forward``'s layout) -> the addresses
    of xw and hg (also hg_all), its first two."""
    xw = _p(saved)
    hg = args.hg_all = xw + B * 3 * H * _F
    args.stats = hg + B * 3 * H * _F
    return xw, hg


def _gru_reference(x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, how):
    """The step ``_GRUStep`` computes, in the reference's torch ops (its second order)."""
    eps, _, h_mask, zone_h = how
    new = recurrence.ln_gru_step(x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, h_mask)
    return recurrence.zone_update((new,), (h,), (zone_h,))


class _GRUStep(torch.autograd.Function):
    """(x, h_0, W_x, W_h, gain_ih, bias_ih, gain_hh, bias_hh, how) -> h_1, as ``_LSTMStep``
    (``how`` = (eps, lib, h_mask, zone_h))."""

    @staticmethod
    def forward(ctx, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, how):
        eps, lib, h_mask, zone_h = ctx.how = how
        h_new, saved = _gru_forward(lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, True,
                                    h_mask, zone_h)
        ctx.save_for_backward(x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, saved)
        return h_new

    @staticmethod
    def backward(ctx, dh):
        if _torch_ops_backward(dh):
            return _reference_backward(ctx, _gru_reference, 8, (dh,))
        x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, saved = ctx.saved_tensors
        eps, lib, h_mask, zone_h = ctx.how
        B, G = x.shape[0], w_ih.shape[0]
        H = G // 3
        dxg, dhg = x.new_empty(2, B, G).unbind()
        direct = x.new_empty(B, H)
        dparams = x.new_zeros(12 * H, dtype=torch.float64)
        dh = dh.contiguous()
        args = _args(GRUArgs, B, H, eps, g_ih, b_ih, g_hh, b_hh)
        args.xw, _ = _gru_saved(args, saved, B, H)
        zeros = _zeros(B * H)
        args.h0, args.grad_out, args.dh = _p(h), _p(zeros), _p(dh)
        args.dxg, args.dhg, args.dparams = _p(dxg), _p(dhg), _p(dparams)
        if zone_h is not None:
            args.zone_h = _p(zone_h)
        _run(lib.gru_step_backward(_byref(args), _p(direct)), "GRUCell backward")
        d_gh, d_bh, d_gu, d_bu, d_gx, d_bx = dparams.to(x.dtype).split(
            [2 * H, 2 * H, H, H, G, G])
        dx, dh0, dw_ih, dw_hh = _grads(ctx.needs_input_grad[:4], x, h, w_ih, w_hh, h_mask, dxg,
                                       dhg, direct)
        return (dx, dh0, dw_ih, dw_hh, d_gx, d_bx, torch.cat([d_gh, d_gu]),
                torch.cat([d_bh, d_bu]), None)


def gru_step(lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, *, h_mask=None, zone_h=None,
             zone_c=None):
    """``recurrence.ln_gru_step`` (and the zoneout after it) as one C step (as ``lstm_step``;
    ``h_mask`` enters W_hh h only, the update z h_0 reads h_0; ``zone_c`` must be None)."""
    if zone_c is not None:
        raise ValueError("GRUCell has no cell state: zone_c must be None, received a tensor.")
    if x.dtype in _HALF:
        return _step_in_float32(gru_step, x.dtype, lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh,
                                eps, h_mask=h_mask, zone_h=zone_h)[0]
    if zone_h is not None:
        (zone_h,) = _zones("GRUCell", x, h.shape[0], h.shape[-1], zone_h=zone_h)
    if h_mask is not None:
        h_mask = h_mask.detach().to(x.dtype)    # (the product reads h * h_mask as float32)
    tensors = tuple(t.contiguous() for t in (x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh))
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _GRUStep.apply(*tensors, (eps, lib, h_mask, zone_h))
    return _gru_forward(lib, *tensors, eps, False, h_mask, zone_h)[0]


def _step_in_float32(step, dtype, lib, *args, **masks):
    """A half-type step on a CPU without native half GEMMs (torch emulates them, several times
    slower than float32): every tensor converted to float32 (differentiably), the step in the
    float32 kernels, the new state rounded to ``dtype`` once -> a tuple of states."""
    *tensors, eps = args
    masks = {k: m.float() for k, m in masks.items() if m is not None}  # (only those given)
    out = step(lib, *(t.float() for t in tensors), eps, **masks)
    return tuple(o.to(dtype) for o in (out if isinstance(out, tuple) else (out,)))


# ---- the cells' entries: the choice of one step's path, once per call ------------------------

def lstm_cell(x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps):
    """One LN-LSTM step (x (B, I), B >= 1): the C step where it applies (``Where.cell``), else
    ``recurrence.ln_lstm_step``; None under autocast. -> (h_1, c_1)."""
    where = native.where(x)
    path = where.cell(x, affine=b_ih is not None)
    if path == "c":
        return lstm_step(where.lib, x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c, eps)
    if path == "reference":
        return recurrence.ln_lstm_step(x, h, c, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, g_c, b_c,
                                       eps)
    return None


def gru_cell(x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, h_mask=None, parts=None):
    """One LN-GRU step (``h_mask``: recurrent dropout on W_hh h only): the C step where it
    applies (``Where.cell``), else ``recurrence.ln_gru_step`` (without autograd and ``h_mask``,
    from ``parts()``, the affine parts the cell keeps, where given); None under autocast.
    -> h_1."""
    where = native.where(x)
    path = where.cell(x, affine=b_ih is not None)
    if path == "c":
        masks = {} if h_mask is None else {"h_mask": h_mask}
        return gru_step(where.lib, x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, **masks)
    if path != "reference":
        return None
    if parts is not None and h_mask is None and not torch.is_grad_enabled():
        return recurrence.ln_gru_step_parts(x, h, w_ih, w_hh, parts(), eps)
    return recurrence.ln_gru_step(x, h, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, eps, h_mask)


def rnn_cell(x, h, w_ih, w_hh, gain, bias, eps, nonlinearity):
    """One LN-RNN step (eq. 4) in few torch ops; None under autocast. -> h_1."""
    if native.where(x).cell(x) is None:
        return None
    return recurrence.ln_rnn_step(x, h, w_ih, w_hh, gain, bias, eps, nonlinearity)


_TORCH_CELLS = {"LSTM": torch._VF.lstm_cell, "GRU": torch._VF.gru_cell,
                "tanh": torch._VF.rnn_tanh_cell, "relu": torch._VF.rnn_relu_cell}


def torch_cell(mode, nonlinearity, x, state, w_ih, w_hh, b_ih, b_hh):
    """One step of torch's own cell op (norm="none"), as torch.nn.*Cell calls it, also under
    autocast, which casts it as it casts torch's cells: the output dtype is theirs (on the CPU
    in bfloat16, RNNCell's is bfloat16, LSTMCell's and GRUCell's float32). -> new state."""
    if mode == "LSTM":
        return tuple(_TORCH_CELLS["LSTM"](x, state, w_ih, w_hh, b_ih, b_hh))
    fn = _TORCH_CELLS["GRU" if mode == "GRU" else nonlinearity]
    return (fn(x, state[0], w_ih, w_hh, b_ih, b_hh),)
