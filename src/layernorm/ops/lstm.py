"""The LN-LSTM over a whole sequence (one layer, one direction) as the operator
``torch.ops.layernorm.ln_lstm``, with a hand-derived backward operator
``torch.ops.layernorm.ln_lstm_backward``, both on the C kernels (``_rnn_steps.c``, CPU float32:
the whole time loop in one call); the graph torch.compile / torch.export see is one opaque op.

Where the C kernels do not run (float64, no C compiler, ``USE_NATIVE = False``, CUDA without
Triton) and under torch.func transforms, ``ln_lstm_sequence`` runs the reference step in the
reference loop (``_loop``, ``layernorm.recurrence``) under ordinary autograd: one form of the
step besides the kernels (its cost: docs/rnnfast.md, "Where the C kernels do not run"). Second
order: with ``create_graph=True`` the operator's backward re-runs the forward as that loop and
differentiates it, so double backward is exact.
"""
import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import kernels as _kernels
from ..recurrence import lengths as _lengths
from ..recurrence import lstm_step, run_direction
from . import common, native
from .gemm import _panels
from .pool import _WORKSPACE, _buffer
from .native import contig as _contig


# ---- the C kernels (CPU float32) -----------------------------------------------------------

def _forward_native(lib, xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x,
                    h_mask, zone_h, zone_c, batch_sizes, eps, save):
    T, B, G = xw.shape
    H = G // 4
    saved = [None] * 5
    if save:  # cs, hg_all, act_all, tc_all, stats (6, T, B): mean / rstd of W_h h, c, xw
        saved = [_WORKSPACE.get(shape, like=xw) for shape in (
            (T + 1, B, H), (T, B, G), (T, B, G), (T, B, H), (6, T, B))]
        saved[0][0] = c0
    # the kernel writes out only where a row runs; the saved buffers are read only where written
    out = _buffer(T, B, H, like=xw, zero=batch_sizes is not None)
    h_n, c_n = (s.detach().clone(memory_format=torch.contiguous_format) for s in (h0, c0))
    native.call(lib, "lstm_forward_seq", native.LSTMArgs, "ln_lstm_sequence",
                 T=T, B=B, H=H, nthreads=native.threads(B), eps=eps,
                 batch_sizes=native.int32(batch_sizes), xw=xw, gain_x=_contig(gain_x),
                 bias_x=_contig(bias_x), wp=_panels(w_hh, lib.panel_width()),
                 gain_h=_contig(gain_h), bias_h=_contig(bias_h), gain_c=_contig(gain_c),
                 bias_c=_contig(bias_c), h0=_contig(h0), out=out, h_n=h_n, c_n=c_n, cs=saved[0],
                 hg_all=saved[1], act_all=saved[2], tc_all=saved[3], stats=saved[4],
                 h_mask=_contig(h_mask), zone_h=_contig(zone_h), zone_c=_contig(zone_c))
    return out, h_n, c_n, (saved if save else None)


def _backward_native(lib, grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out,
                     cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask=None, zone_h=None,
                     zone_c=None):
    T, B, G = xw.shape
    H = G // 4
    dxg = _buffer(T, B, G, like=xw, zero=batch_sizes is not None)  # grad of xw (or xg)
    dh, dc = (g.detach().clone(memory_format=torch.contiguous_format) for g in (grad_hn, grad_cn))
    dparams = torch.zeros(18 * H, dtype=torch.float64)
    dw_hh = common.native_backward(
        lib, "lstm_backward_seq", native.LSTMArgs, "ln_lstm_sequence", _contig(h0), out,
        batch_sizes, G, T=T, B=B, H=H, nthreads=native.threads(B),
        wtp=_panels(w_hh, lib.panel_width(), transposed=True), xw=xw,
        grad_out=grad_out.contiguous(),
        gain_x=_contig(gain_x), gain_h=_contig(gain_h), gain_c=_contig(gain_c), cs=cs,
        hg_all=hg_all, act_all=act_all, tc_all=tc_all, stats=stats, dh=dh, dc=dc, dxg=dxg,
        dparams=dparams, h_mask=_contig(h_mask), zone_h=_contig(zone_h), zone_c=_contig(zone_c))
    n = 18 * H if gain_x is not None else 10 * H
    return dxg, dh, dc, dw_hh, dparams[:n].to(xw.dtype)


# ---- the operators ---------------------------------------------------------------------------

_SCHEMA = ("(Tensor xw, Tensor h0, Tensor c0, Tensor w_hh, Tensor gain_h, Tensor bias_h, "
           "Tensor gain_c, Tensor bias_c, Tensor? gain_x, Tensor? bias_x, Tensor? h_mask, "
           "Tensor? zone_h, Tensor? zone_c, Tensor? batch_sizes, float eps, bool save) -> "
           "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor grad_hn, Tensor grad_cn, Tensor xw, Tensor h0, Tensor w_hh, "
    "Tensor gain_h, Tensor gain_c, Tensor? gain_x, Tensor out, Tensor cs, Tensor hg_all, "
    "Tensor act_all, "
    "Tensor tc_all, Tensor stats, Tensor? batch_sizes, Tensor? h_mask, "
    "Tensor? zone_h, Tensor? zone_c) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")


def _lstm_body(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask, zone_h,
               zone_c, batch_sizes, eps, save):
    """-> out (T, B, H) = [h_1, h_2, ...] (0 past a row's length), h_n, c_n (B, H), the saved
    cs, hg_all, act_all, tc_all, stats (empty without ``save``). Rows sorted by decreasing length; ``batch_sizes`` as ``PackedSequence.batch_sizes``;
    ``h_mask``, ``zone_h``, ``zone_c``: the recurrent regularizers or None."""
    lib = common.c_kernels("ln_lstm", xw)
    with torch.autocast(xw.device.type, enabled=False):
        out, h_n, c_n, saved = _forward_native(lib, xw.contiguous(), h0, c0, w_hh, gain_h, bias_h,
                                               gain_c, bias_c, gain_x, bias_x, h_mask, zone_h,
                                               zone_c, batch_sizes, eps, save)
    return (out, h_n, c_n, *common.saved_or_empty(saved, xw, 4))


ln_lstm_op = torch.library.custom_op("layernorm::ln_lstm", mutates_args=(), schema=_SCHEMA)(
    _lstm_body)


@ln_lstm_op.register_fake
def _(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask, zone_h, zone_c,
      batch_sizes, eps, save):
    T, B, G = xw.shape
    H = G // 4
    new, new_stats = common.fake_saved(xw, save)
    return (xw.new_empty(T, B, H), h0.new_empty(B, H), c0.new_empty(B, H), new(T + 1, B, H),
            new(T, B, G), new(T, B, G), new(T, B, H), new_stats(6, T, B))


def _lstm_backward_body(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out,
                        cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask, zone_h,
                        zone_c):
    """-> grads of xw (T, B, G), h0, c0, w_hh and the LN parameters as one vector [gain_h,
    bias_h (G each), gain_c, bias_c (H each), gain_x, bias_x (G each, with gain_x)]."""
    args = (grad_out.contiguous(), grad_hn, grad_cn, xw.contiguous(), h0, w_hh, gain_h, gain_c,
            gain_x, out, cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask, zone_h, zone_c)
    lib = common.c_kernels("ln_lstm_backward", xw)
    with torch.autocast(xw.device.type, enabled=False):
        return _backward_native(lib, *args)


ln_lstm_backward_op = torch.library.custom_op(
    "layernorm::ln_lstm_backward", mutates_args=(), schema=_BACKWARD_SCHEMA)(_lstm_backward_body)


@ln_lstm_backward_op.register_fake
def _(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out, cs, hg_all, act_all,
      tc_all, stats, batch_sizes, h_mask, zone_h, zone_c):
    T, B, G = xw.shape
    H = G // 4
    n = 18 * H if gain_x is not None else 10 * H
    return (xw.new_empty(T, B, G), xw.new_empty(B, H), xw.new_empty(B, H), xw.new_empty(G, H),
            xw.new_empty(n))


def _first_order(inputs, batch_sizes, out, saved, grads, eager):
    xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, *masks = inputs
    T, B, G = xw.shape
    H = G // 4
    grad_out, grad_hn, grad_cn = (xw.new_zeros(shape) if g is None else g for g, shape in
                                  zip(grads, ((T, B, H), (B, H), (B, H))))
    backward = _lstm_backward_body if eager else ln_lstm_backward_op
    dxw, dh0, dc0, dw_hh, dparams = backward(
        grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out, *saved,
        batch_sizes, *masks)
    parts = dparams.split([G, G, H, H, G, G] if gain_x is not None else [G, G, H, H])
    dx = (parts[4], parts[5]) if gain_x is not None else (None, None)
    return (dxw, dh0, dc0, dw_hh, *parts[:4], *dx, None, None, None)  # the masks: no gradient


# ---- the differentiable loop (second order, torch.func) ---------------------------------------

def _loop(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, batch_sizes, eps, h_mask=None,
          zone_h=None, zone_c=None):
    """The LN-LSTM as the reference step in the reference loop (``layernorm.recurrence``):
    plain differentiable torch ops, with the recurrent regularizers where given."""
    G = xg.shape[-1]
    norm_hh = lambda a, t: F.layer_norm(a, (G,), gain_h, bias_h, eps)  # noqa: E731
    norm_c = lambda a, t: F.layer_norm(a, (G // 4,), gain_c, bias_c, eps)  # noqa: E731
    out, (h, c) = run_direction(
        lambda x, s, t, h_mask=None: lstm_step(x, s[0], s[1], w_hh, norm_hh, norm_c,
                                               h_mask=h_mask),
        xg, (h0, c0), batch_sizes=batch_sizes, h_mask=h_mask,
        zone=common.zone_arg(zone_h, zone_c))
    return out, h, c


def _loop_with_input_ln(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x,
                        h_mask, zone_h, zone_c, batch_sizes, eps):
    xg, _, _ = common.input_ln("ln_lstm_sequence", xw, gain_x, bias_x, (xw.shape[-1],), eps,
                            inside=False)
    return _loop(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, batch_sizes, eps, h_mask,
                 zone_h, zone_c)


_run = common.register_autograd(ln_lstm_op, _lstm_body, "ln_lstm", 3, _loop_with_input_ln,
                              _first_order)
_BACKENDS = common.Backends(triton="ln_lstm_sequence", native=_run, reference=_loop,
                            groups=lambda H: (4 * H,))


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
    T, B, H = common.check_shapes(who, xg, {"h0": h0, "c0": c0}, w_hh, 4, vectors)
    order, batch_sizes = _lengths.encode(who, lengths, batch_sizes, T, B)  # the one check
    masks = dict(h_mask=h_mask, zone_h=zone_h, zone_c=zone_c)
    common.check_masks(who, xg, T, B, H, **masks)
    return common.run_sequence(who, _BACKENDS, xg, (h0, c0),
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
        lib = native.native_lib(xw)
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
        lib = native.native_lib(xw)
        dxw, dh0, dc0, dw_hh, _ = _backward_native(
            lib, grad_out.contiguous(), grad_hn, grad_cn, xw.contiguous(), h0, w_hh, None, None,
            None, out, *saved, batch_sizes)
        return dxw, dh0, dc0, dw_hh, None, None


def plain_applies(*tensors: Tensor) -> bool:
    """Whether ``plain_lstm_sequence`` may run for these tensors: the C kernels' conditions of
    the BN recurrences (eager mode, plain CPU float32 tensors, the kernels loaded, no autocast,
    torch.func or forward-mode AD)."""
    from .bn import applies
    return applies(*tensors)


def plain_lstm_sequence(xw: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor,
                        batch_sizes: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """torch.nn.LSTM's recurrence for one layer and direction (no normalization) in the C
    kernels, where ``plain_applies``::

        i, f, u, o = split(xw_t + W_h h_{t-1})       xw = W_x x + b_ih + b_hh, gate order i f u o
        c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u),   h_t = sigmoid(o) tanh(c_t)

    xw (T, B, 4H), h0, c0 (B, H), w_hh (4H, H); ``batch_sizes``: ``PackedSequence.batch_sizes``
    of a batch sorted by decreasing length (out is 0 past a row's length, h_n / c_n are each
    row's state after its last step), or None. Differentiable to any order. torch's CPU op runs
    packed input 3-4x slower than padded (docs/rnnfast.md); this kernel runs both at one speed.
    """
    if not plain_applies(xw, h0, c0, w_hh):
        raise RuntimeError("plain_lstm_sequence needs eager CPU float32 tensors and the C "
                           "kernels (see plain_applies); call torch's LSTM op otherwise.")
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (xw, h0, c0, w_hh))
    return _PlainLSTM.apply(xw, h0, c0, w_hh, batch_sizes, save)


# The Triton kernels' second order differentiates this operator's reference loop.
_kernels.REFERENCE["lstm"] = functools.partial(common.reference_grads, _loop_with_input_ln, 2)
