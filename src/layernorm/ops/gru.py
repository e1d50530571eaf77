"""The LN-GRU's backends for one layer and direction, below the frame (``sequence``, which has the
entry ``ln_gru_sequence``), as the LN-LSTM's (see ``lstm``): the C kernels' calls, the operators
``torch.ops.layernorm.ln_gru`` / ``ln_gru_backward`` with their bodies and shape functions, the
first-order backward, the reference loop; and the plain GRU (norm="none") in the same C kernel.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..recurrence import gru_step, run_direction
from . import common, native
from .gemm import recurrent_panels
from .native import contig as _contig
from .common import _WORKSPACE, _buffer


def _forward_native(lib, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask,
                    zone_h, batch_sizes, eps, save, bf16=False):
    T, B, G = xw.shape
    H = G // 3
    saved = [None] * 2
    if save:  # hg_all, stats (8, T, B)
        saved = [_WORKSPACE.get(shape, like=xw) for shape in ((T, B, G), (8, T, B))]
    out = _buffer(T, B, H, like=xw, zero=batch_sizes is not None)
    h_n = h0.detach().clone(memory_format=torch.contiguous_format)
    native.call(lib, "gru_forward_seq", native.GRUArgs, "ln_gru_sequence",
                 T=T, B=B, H=H, nthreads=torch.get_num_threads(), path=common.SPLIT, eps=eps,
                 batch_sizes=native.int32(batch_sizes), xw=xw, gain_x=_contig(gain_x),
                 bias_x=_contig(bias_x), **recurrent_panels(lib, w_hh, bf16),
                 gain_h=_contig(gain_h), bias_h=_contig(bias_h), gain_u=_contig(gain_u),
                 bias_u=_contig(bias_u), h0=_contig(h0), out=out, h_n=h_n, hg_all=saved[0],
                 stats=saved[1], h_mask=_contig(h_mask), zone_h=_contig(zone_h))
    return out, h_n, (saved if save else None)


def _backward_native(lib, grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u,
                     gain_x, bias_x, out, hg_all, stats, batch_sizes, h_mask=None, zone_h=None,
                     bf16=False):
    T, B, G = xw.shape
    H = G // 3
    dxg = common.grad_buffer(xw, batch_sizes is not None, bf16)
    dh = grad_hn.detach().clone(memory_format=torch.contiguous_format)
    dparams = torch.zeros(12 * H, dtype=torch.float64)
    dw_hh = common.native_backward(
        lib, "gru_backward_seq", native.GRUArgs, "ln_gru_sequence", _contig(h0), out,
        batch_sizes, G, T=T, B=B, H=H, nthreads=torch.get_num_threads(), path=common.SPLIT,
        **recurrent_panels(lib, w_hh, bf16, transposed=True), bf16=bf16, xw=xw,
        grad_out=grad_out.contiguous(),
        gain_x=_contig(gain_x), bias_x=_contig(bias_x), gain_h=_contig(gain_h),
        bias_h=_contig(bias_h), gain_u=_contig(gain_u), bias_u=_contig(bias_u), hg_all=hg_all,
        stats=stats, dh=dh, dxg=dxg, dparams=dparams, h_mask=_contig(h_mask),
        zone_h=_contig(zone_h))
    n = 12 * H if gain_x is not None else 6 * H
    return dxg, dh, dw_hh, dparams[:n].to(xw.dtype)


_SCHEMA = ("(Tensor xw, Tensor h0, Tensor w_hh, Tensor gain_h, Tensor bias_h, Tensor gain_u, "
           "Tensor bias_u, Tensor? gain_x, Tensor? bias_x, Tensor? h_mask, Tensor? zone_h, "
           "Tensor? batch_sizes, float eps, bool save, bool bf16=False) -> "
           "(Tensor, Tensor, Tensor, Tensor)")
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor grad_hn, Tensor xw, Tensor h0, Tensor w_hh, Tensor gain_h, "
    "Tensor bias_h, Tensor gain_u, Tensor bias_u, Tensor? gain_x, Tensor? bias_x, Tensor out, "
    "Tensor hg_all, Tensor stats, Tensor? batch_sizes, Tensor? h_mask, "
    "Tensor? zone_h, bool bf16=False) -> (Tensor, Tensor, Tensor, Tensor)")


def _gru_body(xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask, zone_h,
              batch_sizes, eps, save, bf16=False):
    """-> out (T, B, H), h_n (B, H), the saved hg_all, stats (empty without ``save``). Rows
    sorted by decreasing length; ``h_mask``, ``zone_h``: the recurrent regularizers or None;
    ``bf16``: as ``ln_lstm``'s (the recurrent products in bfloat16 where the CPU has them)."""
    lib = native.loaded("ln_gru")
    with common.autocast_off(xw.device.type):
        out, h_n, saved = _forward_native(lib, xw.contiguous(), h0, w_hh, gain_h, bias_h, gain_u,
                                          bias_u, gain_x, bias_x, h_mask, zone_h, batch_sizes,
                                          eps, save, bf16)
    return (out, h_n, *common.saved_or_empty(saved, xw, 1))


ln_gru_op = torch.library.custom_op("layernorm::ln_gru", mutates_args=(), schema=_SCHEMA)(
    _gru_body)


@ln_gru_op.register_fake
def _(xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask, zone_h, batch_sizes,
      eps, save, bf16=False):
    T, B, G = xw.shape
    H = G // 3
    new, new_stats = common.fake_saved(xw, save)
    return xw.new_empty(T, B, H), h0.new_empty(B, H), new(T, B, G), new_stats(8, T, B)


def _gru_backward_body(grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x,
                       bias_x, out, hg_all, stats, batch_sizes, h_mask, zone_h, bf16=False):
    """-> grads of xw, h0, w_hh and the LN parameters as one vector [gain_h, bias_h (2H each),
    gain_u, bias_u (H each), gain_x, bias_x (3H each, with gain_x)]."""
    args = (grad_out.contiguous(), grad_hn, xw.contiguous(), h0, w_hh, gain_h, bias_h, gain_u,
            bias_u, gain_x, bias_x, out, hg_all, stats, batch_sizes, h_mask, zone_h)
    lib = native.loaded("ln_gru_backward")
    with common.autocast_off(xw.device.type):
        return _backward_native(lib, *args, bf16=bf16)


ln_gru_backward_op = torch.library.custom_op(
    "layernorm::ln_gru_backward", mutates_args=(), schema=_BACKWARD_SCHEMA)(_gru_backward_body)


@ln_gru_backward_op.register_fake
def _(grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, out,
      hg_all, stats, batch_sizes, h_mask, zone_h, bf16=False):
    T, B, G = xw.shape
    H = G // 3
    n = 12 * H if gain_x is not None else 6 * H
    return xw.new_empty(T, B, G), xw.new_empty(B, H), xw.new_empty(G, H), xw.new_empty(n)


def _first_order(inputs, batch_sizes, out, saved, grads, eager, bf16=False):
    xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, *masks = inputs
    T, B, G = xw.shape
    H = G // 3
    grad_out = xw.new_zeros(T, B, H) if grads[0] is None else grads[0]
    grad_hn = xw.new_zeros(B, H) if grads[1] is None else grads[1]
    backward = _gru_backward_body if eager else ln_gru_backward_op
    dxw, dh0, dw_hh, dparams = backward(
        grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, out,
        *saved, batch_sizes, *masks, bf16)
    parts = dparams.split([2 * H, 2 * H, H, H, G, G] if gain_x is not None else
                          [2 * H, 2 * H, H, H])
    dx = (parts[4], parts[5]) if gain_x is not None else (None, None)
    return (dxw, dh0, dw_hh, *parts[:4], *dx, None, None)  # the masks: no gradient


def _loop(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, batch_sizes, eps, h_mask=None,
          zone_h=None):
    """The LN-GRU as the reference step in the reference loop (``layernorm.recurrence``): plain
    differentiable torch ops, with the recurrent regularizers where given. The recurrent term's
    LN: (r, z) jointly, U h on its own."""
    H = h0.shape[-1]

    def norm_hh(a, t):
        return torch.cat([F.layer_norm(a[:, :2 * H], (2 * H,), gain_h, bias_h, eps),
                          F.layer_norm(a[:, 2 * H:], (H,), gain_u, bias_u, eps)], -1)
    out, (h,) = run_direction(
        lambda x, s, t, h_mask=None: gru_step(x, s[0], w_hh, norm_hh, h_mask=h_mask), xg, (h0,),
        batch_sizes=batch_sizes, h_mask=h_mask, zone=common.zone_arg(zone_h))
    return out, h


def _loop_with_input_ln(xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask,
                        zone_h, batch_sizes, eps):
    H = h0.shape[-1]
    xg, _, _ = common.input_ln("ln_gru_sequence", xw, gain_x, bias_x, (2 * H, H), eps, inside=False)
    return _loop(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, batch_sizes, eps, h_mask, zone_h)


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
        lib = native.loaded("plain_gru_sequence")
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
        lib = native.loaded("plain_gru_sequence")
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
