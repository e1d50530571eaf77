"""The LN-LSTM's backends for one layer and direction, below the frame (``sequence``, which has
the entry ``ln_lstm_sequence``, its checks and the one choice of path): the C kernels' calls
(``_rnn_steps.c``, CPU float32: the whole time loop in one call, the backward in one call per
range of steps), the operators ``torch.ops.layernorm.ln_lstm`` / ``ln_lstm_backward`` with their
bodies and shape functions (torch.compile / torch.export see one opaque op), the first-order
backward through the backward operator, and the reference loop (``layernorm.recurrence``'s step
in its loop: the path where no kernel runs, second order and torch.func); and the plain LSTM
(norm="none") in the same C kernel.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..recurrence import lstm_step, run_direction
from . import common, native
from .gemm import recurrent_panels
from .native import contig as _contig
from .common import _WORKSPACE, _buffer


def _forward_native(lib, xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x,
                    h_mask, zone_h, zone_c, batch_sizes, eps, save, bf16=False):
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
                 T=T, B=B, H=H, nthreads=torch.get_num_threads(), path=common.SPLIT, eps=eps,
                 batch_sizes=native.int32(batch_sizes), xw=xw, gain_x=_contig(gain_x),
                 bias_x=_contig(bias_x), **recurrent_panels(lib, w_hh, bf16),
                 gain_h=_contig(gain_h), bias_h=_contig(bias_h), gain_c=_contig(gain_c),
                 bias_c=_contig(bias_c), h0=_contig(h0), out=out, h_n=h_n, c_n=c_n, cs=saved[0],
                 hg_all=saved[1], act_all=saved[2], tc_all=saved[3], stats=saved[4],
                 h_mask=_contig(h_mask), zone_h=_contig(zone_h), zone_c=_contig(zone_c))
    return out, h_n, c_n, (saved if save else None)


def _backward_native(lib, grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out,
                     cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask=None, zone_h=None,
                     zone_c=None, bf16=False):
    T, B, G = xw.shape
    H = G // 4
    dxg = common.grad_buffer(xw, batch_sizes is not None, bf16)  # grad of xw (or xg)
    dh, dc = (g.detach().clone(memory_format=torch.contiguous_format) for g in (grad_hn, grad_cn))
    dparams = torch.zeros(18 * H, dtype=torch.float64)
    dw_hh = common.native_backward(
        lib, "lstm_backward_seq", native.LSTMArgs, "ln_lstm_sequence", _contig(h0), out,
        batch_sizes, G, T=T, B=B, H=H, nthreads=torch.get_num_threads(), path=common.SPLIT,
        **recurrent_panels(lib, w_hh, bf16, transposed=True), bf16=bf16, xw=xw,
        grad_out=grad_out.contiguous(),
        gain_x=_contig(gain_x), gain_h=_contig(gain_h), gain_c=_contig(gain_c), cs=cs,
        hg_all=hg_all, act_all=act_all, tc_all=tc_all, stats=stats, dh=dh, dc=dc, dxg=dxg,
        dparams=dparams, h_mask=_contig(h_mask), zone_h=_contig(zone_h), zone_c=_contig(zone_c))
    n = 18 * H if gain_x is not None else 10 * H
    return dxg, dh, dc, dw_hh, dparams[:n].to(xw.dtype)


# ---- the operators ---------------------------------------------------------------------------

_SCHEMA = ("(Tensor xw, Tensor h0, Tensor c0, Tensor w_hh, Tensor gain_h, Tensor bias_h, "
           "Tensor gain_c, Tensor bias_c, Tensor? gain_x, Tensor? bias_x, Tensor? h_mask, "
           "Tensor? zone_h, Tensor? zone_c, Tensor? batch_sizes, float eps, bool save, "
           "bool bf16=False) -> "
           "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor grad_hn, Tensor grad_cn, Tensor xw, Tensor h0, Tensor w_hh, "
    "Tensor gain_h, Tensor gain_c, Tensor? gain_x, Tensor out, Tensor cs, Tensor hg_all, "
    "Tensor act_all, "
    "Tensor tc_all, Tensor stats, Tensor? batch_sizes, Tensor? h_mask, "
    "Tensor? zone_h, Tensor? zone_c, bool bf16=False) -> (Tensor, Tensor, Tensor, Tensor, "
    "Tensor)")


def _lstm_body(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask, zone_h,
               zone_c, batch_sizes, eps, save, bf16=False):
    """-> out (T, B, H) = [h_1, h_2, ...] (0 past a row's length), h_n, c_n (B, H), the saved
    cs, hg_all, act_all, tc_all, stats (empty without ``save``). Rows sorted by decreasing
    length; ``batch_sizes`` as ``PackedSequence.batch_sizes``; ``h_mask``, ``zone_h``,
    ``zone_c``: the recurrent regularizers or None. ``bf16``: the caller computes in bfloat16
    (a bfloat16 module, or autocast to bfloat16; the tensors here are float32): the recurrent
    products of the forward and the backward run on the CPU's bfloat16 dot products where it has
    them (``gemm.recurrent_panels``), dW_hh as bfloat16 GEMMs (``gemm.WeightGrad``)."""
    lib = native.loaded("ln_lstm")
    with common.autocast_off(xw.device.type):
        out, h_n, c_n, saved = _forward_native(lib, xw.contiguous(), h0, c0, w_hh, gain_h, bias_h,
                                               gain_c, bias_c, gain_x, bias_x, h_mask, zone_h,
                                               zone_c, batch_sizes, eps, save, bf16)
    return (out, h_n, c_n, *common.saved_or_empty(saved, xw, 4))


ln_lstm_op = torch.library.custom_op("layernorm::ln_lstm", mutates_args=(), schema=_SCHEMA)(
    _lstm_body)


@ln_lstm_op.register_fake
def _(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask, zone_h, zone_c,
      batch_sizes, eps, save, bf16=False):
    T, B, G = xw.shape
    H = G // 4
    new, new_stats = common.fake_saved(xw, save)
    return (xw.new_empty(T, B, H), h0.new_empty(B, H), c0.new_empty(B, H), new(T + 1, B, H),
            new(T, B, G), new(T, B, G), new(T, B, H), new_stats(6, T, B))


def _lstm_backward_body(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out,
                        cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask, zone_h,
                        zone_c, bf16=False):
    """-> grads of xw (T, B, G), h0, c0, w_hh and the LN parameters as one vector [gain_h,
    bias_h (G each), gain_c, bias_c (H each), gain_x, bias_x (G each, with gain_x)]. ``bf16``:
    as the forward's, for the recurrent product dhg_t W_hh."""
    args = (grad_out.contiguous(), grad_hn, grad_cn, xw.contiguous(), h0, w_hh, gain_h, gain_c,
            gain_x, out, cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask, zone_h, zone_c)
    lib = native.loaded("ln_lstm_backward")
    with common.autocast_off(xw.device.type):
        return _backward_native(lib, *args, bf16=bf16)


ln_lstm_backward_op = torch.library.custom_op(
    "layernorm::ln_lstm_backward", mutates_args=(), schema=_BACKWARD_SCHEMA)(_lstm_backward_body)


@ln_lstm_backward_op.register_fake
def _(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out, cs, hg_all, act_all,
      tc_all, stats, batch_sizes, h_mask, zone_h, zone_c, bf16=False):
    T, B, G = xw.shape
    H = G // 4
    n = 18 * H if gain_x is not None else 10 * H
    return (xw.new_empty(T, B, G), xw.new_empty(B, H), xw.new_empty(B, H), xw.new_empty(G, H),
            xw.new_empty(n))


def _first_order(inputs, batch_sizes, out, saved, grads, eager, bf16=False):
    xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, *masks = inputs
    T, B, G = xw.shape
    H = G // 4
    grad_out, grad_hn, grad_cn = (xw.new_zeros(shape) if g is None else g for g, shape in
                                  zip(grads, ((T, B, H), (B, H), (B, H))))
    backward = _lstm_backward_body if eager else ln_lstm_backward_op
    dxw, dh0, dc0, dw_hh, dparams = backward(
        grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out, *saved,
        batch_sizes, *masks, bf16)
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
        lib = native.loaded("plain_lstm_sequence")
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
        lib = native.loaded("plain_lstm_sequence")
        dxw, dh0, dc0, dw_hh, _ = _backward_native(
            lib, grad_out.contiguous(), grad_hn, grad_cn, xw.contiguous(), h0, w_hh, None, None,
            None, out, *saved, batch_sizes)
        return dxw, dh0, dc0, dw_hh, None, None


def plain_lstm_direction(x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor,
                         bias: Tensor | None, batch_sizes: Tensor | None = None):
    """norm="none" for one layer and direction in the C kernels (``plain_lstm_sequence`` of
    ``F.linear(x, w_ih, bias)``, bias = b_ih + b_hh) where they run (``native.where``: eager
    mode, plain CPU float32 tensors, the kernels loaded, no autocast, torch.func transform,
    forward-mode AD or ONNX capture) -> (out, h_n, c_n); else None (the caller runs torch's op).
    """
    if not plain_runs(x, h0, c0, w_ih, w_hh, bias):
        return None
    return plain_lstm_sequence(F.linear(x, w_ih, bias), h0, c0, w_hh, batch_sizes)


def plain_runs(*tensors: Tensor | None) -> bool:
    """Whether the plain recurrences (``plain_lstm_direction`` / ``ops.gru.plain_gru_direction``)
    run the C loop for these tensors (None entries ignored): the answer they give, asked once per
    call (``native.where``). A stack on packed input asks it first, before it lays the batch
    out for them, where torch's op would take the packed batch as it is."""
    tensors = [t for t in tensors if t is not None]
    return native.where(*tensors).c(*tensors) is not None


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
