"""The LN-GRU over a whole sequence (one layer, one direction): the entry ``ln_gru_sequence``
and the plain GRU (norm="none") in the same C kernel; the operators
``torch.ops.layernorm.ln_gru`` / ``ln_gru_backward`` and the reference loop are
``gru_backend``'s; paths, second order and torch.func as the LN-LSTM (see ``lstm``)."""

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import kernels as _kernels
from ..recurrence import lengths as _lengths
from ..recurrence import gru_step, run_direction
from . import common, dispatch, sequence
from .gru_backend import (_backward_native, _first_order, _forward_native, _gru_body,
                          _loop, _loop_with_input_ln, ln_gru_op)


_run = sequence.register_autograd(ln_gru_op, _gru_body, "ln_gru", 2, _loop_with_input_ln,
                                 _first_order)
_BACKENDS = sequence.Backends(triton="ln_gru_sequence", native=_run, reference=_loop,
                              groups=(2, 1))


def ln_gru_sequence(xg: Tensor, h0: Tensor, w_hh: Tensor, gain_h: Tensor, bias_h: Tensor,
                    gain_u: Tensor, bias_u: Tensor, lengths: Tensor | None = None,
                    eps: float = 1e-5, gain_x: Tensor | None = None, bias_x: Tensor | None = None,
                    *, batch_sizes: Tensor | None = None, h_mask: Tensor | None = None,
                    zone_h: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One layer, one direction of the LN-GRU (paper, section 3.1) over a whole sequence::

        r, z = split(sigmoid(LN(W_h h_{t-1}; gain_h, bias_h) + xg_t[:2H]))   LN over 2H jointly
        h~   = tanh(xg_t[2H:] + r * LN(U h_{t-1}; gain_u, bias_u))           U h normalized before r
        h_t  = (1 - z) h~ + z h_{t-1}                                        torch.nn.GRU's z

    Gate order r, z, n and the update convention of torch.nn.GRU (so torch's weights load
    unchanged, as in ``layernorm.GRU``); the paper writes h_t = (1 - z) h_{t-1} + z h~, i.e. its z
    is 1 - this z (the same family: negate the z half of the gate pre-activation).

    Args:
        xg: (T, B, 3H) input terms for all steps: ``[LN(W_x x_t; g2, b2) (2H, for r, z);
            LN(W x_t; g3, b3) (H, for h~)]`` plus any biases, computed outside with autograd;
            or, with ``gain_x``/``bias_x`` (3H,), the raw ``[W_x x_t; W x_t]``, normalized here
            (the two groups separately; in the C kernel's step on the CPU).
        h0: (B, H). w_hh: (3H, H) = [W_h (2H rows: r, z); U (H rows)].
        gain_h, bias_h: (2H,) the LN of W_h h. gain_u, bias_u: (H,) the LN of U h.
        lengths: None or (B,) integer tensor, any order; steps t >= lengths[b] copy the state
            forward and give out[t, b] = 0. batch_sizes: as in ``ln_lstm_sequence``.
        h_mask: (B, H) recurrent dropout: W_h and U read h_{t-1} * h_mask, the update z h_{t-1}
            the unmasked h_{t-1}. zone_h: (T, B, H) zoneout, h_t = z h_{t-1} + (1 - z) h~_t with
            h~_t the GRU's new state. None: off (docs/rnn.md); the masks get no gradient.
    Returns:
        out (T, B, H), h_n (B, H) (at each example's true length), dtype as ``ln_lstm_sequence``.
    """
    who = "ln_gru_sequence"
    H = h0.shape[-1]
    vectors = {"gain_h": (gain_h, 2 * H), "bias_h": (bias_h, 2 * H), "gain_u": (gain_u, H),
               "bias_u": (bias_u, H)}
    if gain_x is not None and bias_x is not None:
        vectors.update(gain_x=(gain_x, 3 * H), bias_x=(bias_x, 3 * H))
    masks = dict(h_mask=h_mask, zone_h=zone_h)
    where = dispatch.where(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x,
                           lengths, batch_sizes, *masks.values(), rnn=True)  # asked once
    T, B, H = common.check_shapes(who, xg, {"h0": h0}, w_hh, 3, vectors, where.autocast)
    order = None
    if lengths is not None or batch_sizes is not None:   # the one check (or found recorded)
        order, batch_sizes = _lengths.encode(who, lengths, batch_sizes, T, B)
    common.check_masks(who, xg, T, B, H, **masks)
    return sequence.run_sequence(who, _BACKENDS, where, xg, (h0,),
                                 (w_hh, gain_h, bias_h, gain_u, bias_u), gain_x, bias_x, masks,
                                 order, batch_sizes, eps)


# ---- the plain GRU (norm="none") through the same C kernel -------------------------------------

def _plain_loop(xw, h0, w_hh, bias_u, batch_sizes):
    """torch.nn.GRU's recurrence (no LN) as the reference step in the reference loop
    (``layernorm.recurrence``): the recurrent term W_hh h + [0; 0; b_hn]; for second order."""
    shift = torch.cat([bias_u.new_zeros(2 * bias_u.shape[0]), bias_u])

    def step(x, s, t, h_mask=None):
        return gru_step(x, s[0], w_hh, lambda a, t: a + shift)
    out, (h,) = run_direction(step, xw, (h0,), batch_sizes=batch_sizes)
    return out, h


class _PlainGRU(torch.autograd.Function):
    """The plain GRU over a whole sequence in the C kernels (``gru_forward_seq`` /
    ``gru_backward_seq`` with no LN gains); with ``create_graph=True`` the backward
    differentiates ``_plain_loop``."""

    @staticmethod
    def forward(ctx, xw, h0, w_hh, bias_u, batch_sizes, save):
        lib = common.c_kernels("plain_gru_sequence", xw)
        out, h_n, saved = _forward_native(lib, xw.contiguous(), h0, w_hh, None, None, None,
                                          bias_u, None, None, None, None, batch_sizes, 0.0, save)
        ctx.save_for_backward(xw, h0, w_hh, bias_u, batch_sizes, out, *(saved or ()))
        return out, h_n

    @staticmethod
    def backward(ctx, grad_out, grad_hn):
        xw, h0, w_hh, bias_u, batch_sizes, out, *saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: the differentiable loop
            sizes = None if batch_sizes is None else batch_sizes.tolist()
            found = common.differentiable_backward(
                lambda *xs: _plain_loop(*xs, sizes), (xw, h0, w_hh, bias_u),
                ctx.needs_input_grad[:4], (grad_out, grad_hn))
            return (*found, None, None)
        if not saved:
            raise RuntimeError("plain_gru_sequence was called without autograd, so it kept "
                               "nothing for the backward; call it with gradients enabled.")
        lib = common.c_kernels("plain_gru_sequence", xw)
        H = h0.shape[-1]
        dxw, dh0, dw_hh, dparams = _backward_native(
            lib, grad_out.contiguous(), grad_hn, xw.contiguous(), h0, w_hh, None, None, None,
            bias_u, None, None, out, *saved, batch_sizes)
        return dxw, dh0, dw_hh, dparams[5 * H:6 * H], None, None


def plain_gru_direction(x: Tensor, h0: Tensor, w_ih: Tensor, w_hh: Tensor,
                        bias_ih: Tensor | None, bias_hh: Tensor | None,
                        batch_sizes: Tensor | None = None):
    """norm="none" GRU for one layer and direction in the C kernels, where they run (as
    ``ops.lstm.plain_lstm_direction``; b_hr, b_hz join the input term, b_hn stays inside)
    -> (out, h_n); else None (the caller runs torch's op)."""
    from .lstm import plain_runs
    if not plain_runs(x, h0, w_ih, w_hh, bias_ih, bias_hh):
        return None
    H = h0.shape[-1]
    if bias_hh is None:
        b, bias_u = None, x.new_zeros(H)
    else:
        b = bias_ih + torch.cat([bias_hh[:2 * H], bias_hh.new_zeros(H)])
        bias_u = bias_hh[2 * H:]
    return plain_gru_sequence(F.linear(x, w_ih, b), h0, w_hh, bias_u, batch_sizes)


def plain_gru_sequence(xw: Tensor, h0: Tensor, w_hh: Tensor, bias_u: Tensor,
                       batch_sizes: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """torch.nn.GRU's recurrence for one layer and direction (no normalization) in the C
    kernels (CPU float32 tensors)::

        r, z = sigmoid(xw_t[:2H] + W_h h_{t-1})    xw = W_x x + b_ih + [b_hr; b_hz; 0]
        n = tanh(xw_t[2H:] + r (U h_{t-1} + b_hn))   (bias_u = b_hn),  h_t = n + z (h_{t-1} - n)

    xw (T, B, 3H), h0 (B, H), w_hh (3H, H) = [W_h; U], bias_u (H,); ``batch_sizes`` as
    ``plain_lstm_sequence``'s. Differentiable to any order."""
    from .lstm import needs_float32_cpu
    needs_float32_cpu("plain_gru_sequence", xw, h0, w_hh, bias_u)
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (xw, h0, w_hh, bias_u))
    return _PlainGRU.apply(xw, h0, w_hh, bias_u, batch_sizes, save)


# The Triton kernels' second order differentiates this operator's reference loop.
_kernels.REFERENCE["gru"] = functools.partial(sequence.reference_grads, _loop_with_input_ln, 1)
