"""The LN-LSTM over a whole sequence (one layer, one direction): the entry ``ln_lstm_sequence``
(its checks, then one call of ``sequence.run_sequence``, which picks the path once) and the plain
LSTM (norm="none") in the same C kernel. The operators ``torch.ops.layernorm.ln_lstm`` /
``ln_lstm_backward`` (the C kernels, ``_rnn_steps.c``, CPU float32: the whole time loop in one
call; torch.compile / torch.export see one opaque op) and the reference loop are
``lstm_backend``'s; this module registers their autograd and assembles the cell's backends.

Where the C kernels do not run (float64, no C compiler, ``USE_NATIVE = False``, CUDA without
Triton) and under torch.func transforms, ``ln_lstm_sequence`` runs the reference step in the
reference loop (``layernorm.recurrence``) under ordinary autograd: one form of the step besides
the kernels (its cost: docs/rnnfast.md, "Where the C kernels do not run"). Second order: with
``create_graph=True`` the operator's backward re-runs the forward as that loop and
differentiates it, so double backward is exact.
"""

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import kernels as _kernels
from ..recurrence import lengths as _lengths
from ..recurrence import lstm_step, run_direction
from . import common, dispatch, native, sequence
from .lstm_backend import (_backward_native, _first_order, _forward_native, _lstm_body,
                           _loop, _loop_with_input_ln, ln_lstm_op)


_run = sequence.register_autograd(ln_lstm_op, _lstm_body, "ln_lstm", 3, _loop_with_input_ln,
                                 _first_order)
_BACKENDS = sequence.Backends(triton="ln_lstm_sequence", native=_run, reference=_loop,
                              groups=(4,))


# ---- the entry point -------------------------------------------------------------------------

def ln_lstm_sequence(xg: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, gain_h: Tensor,
                     bias_h: Tensor, gain_c: Tensor, bias_c: Tensor, lengths: Tensor | None = None,
                     eps: float = 1e-5, gain_x: Tensor | None = None, bias_x: Tensor | None = None,
                     *, batch_sizes: Tensor | None = None, h_mask: Tensor | None = None,
                     zone_h: Tensor | None = None, zone_c: Tensor | None = None
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """One layer, one direction of the LN-LSTM (paper, section 3.1) over a whole sequence::

        gates = LN(W_h h_{t-1}; gain_h, bias_h) + xg_t          LN over all 4H gates jointly
        i, f, u, o = split(gates)                                 torch.nn.LSTM's gate order
        c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u)
        h_t = sigmoid(o) tanh(LN(c_t; gain_c, bias_c))            raw c_t carried to step t+1

    Args:
        xg: (T, B, 4H) input term ``LN(W_x x_t; g2, b2) + b`` for all steps; or, with
            ``gain_x``/``bias_x`` (4H,), the raw ``W_x x_t``, normalized here (in the C kernel's
            step, which saves a pass over (T, B, 4H)): xg_t := LN(xg_t; gain_x, bias_x).
        h0, c0: (B, H) initial states. w_hh: (4H, H). gain_h, bias_h: (4H,). gain_c, bias_c: (H,).
        lengths: None or (B,) integer tensor of true lengths, in any order. Steps t >= lengths[b]
            copy the state forward and give out[t, b] = 0.
        batch_sizes: instead of ``lengths``, for a batch already sorted by decreasing length:
            ``PackedSequence.batch_sizes`` (T,).
        h_mask: (B, H) recurrent dropout (values 0 or 1/(1-p)): the recurrent term reads
            W_h (h_{t-1} * h_mask). zone_h, zone_c: (T, B, H) zoneout (values in [0, 1]): after
            the cell's candidates, h_t = z_h h_{t-1} + (1 - z_h) h~_t and c_t likewise; out[t] is
            the zoned-out h_t. None (the default): off. The masks get no gradient (docs/rnn.md).
    Returns:
        out (T, B, H), h_n (B, H), c_n (B, H): the last two at each example's true length; in
        xg's dtype, or the autocast dtype under ``torch.autocast`` (as torch.nn.LSTM).
    Differentiable to any order in every tensor argument (see the module docstring).
    """
    who = "ln_lstm_sequence"
    H = h0.shape[-1]
    vectors = {"gain_h": (gain_h, 4 * H), "bias_h": (bias_h, 4 * H), "gain_c": (gain_c, H),
               "bias_c": (bias_c, H)}
    if gain_x is not None and bias_x is not None:
        vectors.update(gain_x=(gain_x, 4 * H), bias_x=(bias_x, 4 * H))
    masks = dict(h_mask=h_mask, zone_h=zone_h, zone_c=zone_c)
    where = dispatch.where(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x,
                           lengths, batch_sizes, *masks.values(), rnn=True)  # asked once
    T, B, H = common.check_shapes(who, xg, {"h0": h0, "c0": c0}, w_hh, 4, vectors,
                                  where.autocast)
    order = None
    if lengths is not None or batch_sizes is not None:   # the one check (or found recorded)
        order, batch_sizes = _lengths.encode(who, lengths, batch_sizes, T, B)
    common.check_masks(who, xg, T, B, H, **masks)
    return sequence.run_sequence(who, _BACKENDS, where, xg, (h0, c0),
                                 (w_hh, gain_h, bias_h, gain_c, bias_c), gain_x, bias_x, masks,
                               order, batch_sizes, eps)


# ---- the plain LSTM (norm="none") through the same C kernel ------------------------------------

def _plain_loop(xw, h0, c0, w_hh, batch_sizes):
    """torch.nn.LSTM's recurrence (no LN) as the reference step in the reference loop
    (``layernorm.recurrence``): differentiable torch ops, for second order."""
    def step(x, s, t, h_mask=None):
        return lstm_step(x, s[0], s[1], w_hh, lambda a, t: a, lambda a, t: a)
    out, (h, c) = run_direction(step, xw, (h0, c0), batch_sizes=batch_sizes)
    return out, h, c


class _PlainLSTM(torch.autograd.Function):
    """The plain LSTM over a whole sequence in the C kernels (``lstm_forward_seq`` /
    ``lstm_backward_seq`` with no LN gains): forward, and a first-order backward in one C call
    per range of steps; with ``create_graph=True`` the backward differentiates ``_plain_loop``."""

    @staticmethod
    def forward(ctx, xw, h0, c0, w_hh, batch_sizes, save):
        lib = common.c_kernels("plain_lstm_sequence", xw)
        out, h_n, c_n, saved = _forward_native(
            lib, xw.contiguous(), h0, c0, w_hh, None, None, None, None, None, None, None, None,
            None, batch_sizes, 0.0, save)
        ctx.save_for_backward(xw, h0, c0, w_hh, batch_sizes, out, *(saved or ()))
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, grad_out, grad_hn, grad_cn):
        xw, h0, c0, w_hh, batch_sizes, out, *saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: the differentiable loop
            sizes = None if batch_sizes is None else batch_sizes.tolist()
            found = common.differentiable_backward(
                lambda *xs: _plain_loop(*xs, sizes), (xw, h0, c0, w_hh),
                ctx.needs_input_grad[:4], (grad_out, grad_hn, grad_cn))
            return (*found, None, None)
        if not saved:
            raise RuntimeError("plain_lstm_sequence was called without autograd, so it kept "
                               "nothing for the backward; call it with gradients enabled.")
        lib = common.c_kernels("plain_lstm_sequence", xw)
        dxw, dh0, dc0, dw_hh, _ = _backward_native(
            lib, grad_out.contiguous(), grad_hn, grad_cn, xw.contiguous(), h0, w_hh, None, None,
            None, out, *saved, batch_sizes)
        return dxw, dh0, dc0, dw_hh, None, None


def plain_lstm_direction(x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor,
                         bias: Tensor | None, batch_sizes: Tensor | None = None):
    """norm="none" for one layer and direction in the C kernels (``plain_lstm_sequence`` of
    ``F.linear(x, w_ih, bias)``, bias = b_ih + b_hh) where they run (``dispatch.where``: eager
    mode, plain CPU float32 tensors, the kernels loaded, no autocast, torch.func transform,
    forward-mode AD or ONNX capture) -> (out, h_n, c_n); else None (the caller runs torch's op).
    """
    if not plain_runs(x, h0, c0, w_ih, w_hh, bias):
        return None
    return plain_lstm_sequence(F.linear(x, w_ih, bias), h0, c0, w_hh, batch_sizes)


def plain_runs(*tensors: Tensor | None) -> bool:
    """Whether the plain recurrences (``plain_lstm_direction`` / ``ops.gru.plain_gru_direction``)
    run the C loop for these tensors (None entries ignored): the answer they give, asked once per
    call (``dispatch.where``). A stack on packed input asks it first, before it lays the batch
    out for them, where torch's op would take the packed batch as it is."""
    tensors = [t for t in tensors if t is not None]
    return dispatch.where(*tensors).c(*tensors) is not None


def needs_float32_cpu(who: str, *tensors: Tensor) -> None:
    """The plain recurrences' guard: CPU float32 tensors and loaded C kernels, or an error."""
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors) or \
            native.load() is None:
        raise RuntimeError(f"{who} needs eager CPU float32 tensors and the C kernels; call "
                           f"torch's op otherwise (``plain_*_direction`` chooses for you).")


def plain_lstm_sequence(xw: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor,
                        batch_sizes: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """torch.nn.LSTM's recurrence for one layer and direction (no normalization) in the C
    kernels (CPU float32 tensors)::

        i, f, u, o = split(xw_t + W_h h_{t-1})       xw = W_x x + b_ih + b_hh, gate order i f u o
        c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u),   h_t = sigmoid(o) tanh(c_t)

    xw (T, B, 4H), h0, c0 (B, H), w_hh (4H, H); ``batch_sizes``: ``PackedSequence.batch_sizes``
    of a batch sorted by decreasing length (out is 0 past a row's length, h_n / c_n are each
    row's state after its last step), or None. Differentiable to any order. torch's CPU op runs
    packed input 3-4x slower than padded (docs/rnnfast.md); this kernel runs both at one speed.
    """
    needs_float32_cpu("plain_lstm_sequence", xw, h0, c0, w_hh)
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (xw, h0, c0, w_hh))
    return _PlainLSTM.apply(xw, h0, c0, w_hh, batch_sizes, save)


# The Triton kernels' second order differentiates this operator's reference loop.
_kernels.REFERENCE["lstm"] = functools.partial(sequence.reference_grads, _loop_with_input_ln, 2)
