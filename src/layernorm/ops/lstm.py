"""The LN-LSTM over a whole sequence (one layer, one direction) as the operator
``torch.ops.layernorm.ln_lstm``, with a hand-derived backward operator
``torch.ops.layernorm.ln_lstm_backward``.

Paths, chosen inside the operator (the graph torch.compile / torch.export see is one opaque op):
the C kernels (``_rnn_steps.c``, CPU float32: the whole time loop in one call) or torch ops (any
device and dtype). Both save the same buffers, and the operator returns which path ran, so its
backward reads them the way they were written. Second order: with ``create_graph=True`` the
backward re-runs the forward as a differentiable loop of torch ops (``_loop``: the reference step
in the reference loop, ``layernorm.recurrence``) and differentiates that, so double backward is
exact; under torch.func transforms that loop runs directly.

The torch-ops path (``_forward_ops`` / ``_backward_ops``) is a fast path like the C kernels, not
the reference under autograd: the operator's contract (its fake implementation promises
torch.compile / torch.export the saved buffers, and one backward operator reads them on either
path) needs a forward that fills them, and its in-place loops measured faster than autograd over
the reference (float64, T 50, B 32, H 128, one thread: 99 against 167 ms a training step, before
the second forward that recomputing inside the operator would add). It is tested against the
reference (tests/test_fused.py runs every comparison on each path).
"""
import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import kernels as _kernels
from ..recurrence import lengths as _lengths
from ..recurrence import lstm_step, run_direction
from . import common, native
from .common import _WORKSPACE, _Linear, _buffer, _panels
from .native import contig as _contig

_layer_norm, _layer_norm_backward = common._layer_norm, common._layer_norm_backward


def _scale(H: int, like: Tensor) -> Tensor:
    """m = [1, 1, 2, 1] per gate block: sigmoid(m * pre) gives i, f, o and (tanh(u) + 1) / 2."""
    m = like.new_ones(4, H)
    m[2] = 2
    return m.reshape(4 * H)


# ---- torch ops (any device, any dtype) -----------------------------------------------------

def _forward_ops(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask,
                 zone_h, zone_c, batch_sizes, eps, save):
    """The forward loop in torch ops. Saves act = [sigmoid(i), sigmoid(f), tanh(u), sigmoid(o)]
    as the C kernel does. Returns out, h_n, c_n, [cs, hg_all, act_all, tc_all, stats]. With
    zoneout cs holds the carried c_t and the LN of c reads the candidate c~_t (as the C kernel;
    the backward recomputes c~_t from act_all and cs)."""
    T, B, G = xw.shape
    H = G // 4
    m = _scale(H, xw)
    gain_h2, bias_h2 = gain_h * m, bias_h * m  # pre-scaled for tanh(x) = 2 sigmoid(2x) - 1
    gain_c2, bias_c2 = gain_c * 2, bias_c * 2
    linear = _Linear(w_hh, B)
    stats = xw.new_zeros(6, T, B, dtype=common.stats_dtype(xw.dtype)) if save else None
    xg = xw
    if gain_x is not None:  # the input LN (its statistics kept for the backward)
        xg, mean_x, rstd_x = _layer_norm(xw, (G,), gain_x, bias_x, eps)
        if save:
            stats[4].copy_(mean_x.squeeze(-1))
            stats[5].copy_(rstd_x.squeeze(-1))

    out = _buffer(T, B, H, like=xw)     # out[t] = h_{t+1}
    cs = _buffer(T + 1, B, H, like=xw)  # raw cell states, cs[0] = c0
    cs[0] = c0
    hg_all = _buffer(T, B, G, like=xw) if save else None  # W_h h, the LN input
    act_all = common.scratch(save, T, B, G, xw)
    tc_all = common.scratch(save, T, B, H, xw)   # tanh(LN(c_t))

    steps = lambda x, shift=0: common.steps(x, batch_sizes, T, shift)  # noqa: E731
    h_prev, h_new = common.prev_steps(h0, out, batch_sizes, T), steps(out)
    c_prev, c_new = steps(cs), steps(cs, 1)
    xgs, acts, tcs = steps(xg), steps(act_all), steps(tc_all)
    hgs = steps(hg_all) if save else [None] * T
    ingate, forgetgate, cellgate, outgate = (steps(a) for a in act_all.split(H, -1))
    hms = None if h_mask is None else common.prefixes(h_mask, batch_sizes, T)
    zhs, zcs = (None if z is None else steps(z) for z in (zone_h, zone_c))
    ccs = None if zone_c is None else common.prefixes(xw.new_empty(B, H), batch_sizes, T)
    for t in range(common.n_steps(batch_sizes, T)):
        # gates = LN(W_h (h_{t-1} * h_mask); g1, b1) + xg_t                             (B, 4H)
        hg = linear(h_prev[t] if hms is None else h_prev[t] * hms[t], out=hgs[t])
        pre, mean_h, rstd_h = _layer_norm(hg, (G,), gain_h2, bias_h2, eps)
        pre.addcmul_(xgs[t], m)
        torch.sigmoid(pre, out=acts[t])          # cellgate = (tanh(u) + 1) / 2 for now
        # c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u)                                   (B, H)
        cellgate[t].mul_(2).sub_(1)
        c = torch.mul(forgetgate[t], c_prev[t], out=c_new[t] if zcs is None else ccs[t])
        c.addcmul_(ingate[t], cellgate[t])
        # h_t = sigmoid(o) tanh(LN(c_t; g3, b3))                                          (B, H)
        cn2, mean_c, rstd_c = _layer_norm(c, (H,), gain_c2, bias_c2, eps)
        torch.sigmoid(cn2, out=tcs[t]).mul_(2).sub_(1)
        torch.mul(outgate[t], tcs[t], out=h_new[t])
        # zoneout: s_t = s~_t + z (s_{t-1} - s~_t)
        if zcs is not None:
            torch.lerp(c, c_prev[t], zcs[t], out=c_new[t])
        if zhs is not None:
            h_new[t].lerp_(h_prev[t], zhs[t])
        if save:
            bs = c.shape[0]
            for k, v in enumerate((mean_h, rstd_h, mean_c, rstd_c)):
                stats[k, t, :bs] = v.squeeze(-1)

    lens = common.row_lengths(batch_sizes, T, B)
    h_n, c_n = common.final_state(out, lens, h0), common.final_state(cs, lens)
    return out, h_n, c_n, ([cs, hg_all, act_all, tc_all, stats] if save else None)


def _backward_ops(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out, cs,
                  hg_all, act_all, tc_all, stats, batch_sizes, h_mask=None, zone_h=None,
                  zone_c=None):
    """The hand-derived backward loop in torch ops over ``_forward_ops``' buffers."""
    T, B, G = hg_all.shape
    H = G // 4
    blocks = common.last_steps(common.row_lengths(batch_sizes, T, B), B)
    linear_t = _Linear(w_hh.t(), B)  # dh_{t-1} = d(W_h h_{t-1}) @ W_h

    dxg = _buffer(T, B, G, like=hg_all)    # d pre: grad of xg and of LN_h
    dhg = _buffer(T, B, G, like=hg_all)    # grad of W_h h_{t-1}
    dcn = _buffer(T, B, H, like=hg_all)    # grad of LN(c_t)
    dh = grad_hn.new_zeros(B, H)
    dc = grad_cn.new_zeros(B, H)
    deriv = hg_all.new_empty(B, G)
    dtc = hg_all.new_empty(B, H)

    steps = lambda x, shift=0: common.steps(x, batch_sizes, T, shift)  # noqa: E731
    rows = lambda x: common.prefixes(x, batch_sizes, T)  # noqa: E731
    tcs, c_new, c_prev = steps(tc_all), steps(cs, 1), steps(cs)
    ingate, forgetgate, cellgate, outgate = (steps(a) for a in act_all.split(H, -1))
    d_pres, d_cns, d_hgs, hgs = steps(dxg), steps(dcn), steps(dhg), steps(hg_all)
    d_i, d_f, d_u, d_o = (steps(d) for d in dxg.split(H, -1))
    grad_outs = steps(grad_out)
    dhs, dcs, derivs, dtcs = rows(dh), rows(dc), rows(deriv), rows(dtc)
    hms = None if h_mask is None else rows(h_mask)
    zhs, zcs = (None if z is None else steps(z) for z in (zone_h, zone_c))
    for t in range(common.n_steps(batch_sizes, T) - 1, -1, -1):
        if t in blocks:  # these examples' last step: grads of h_n, c_n enter here
            lo, hi = blocks[t]
            dh[lo:hi] += grad_hn[lo:hi]
            dc[lo:hi] += grad_cn[lo:hi]
        dh_t = dhs[t].add_(grad_outs[t])
        if zhs is not None:  # zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~_t
            zd_h = dh_t * zhs[t]
            dh_t.sub_(zd_h)
        tc, og = tcs[t], outgate[t]
        bs = dh_t.shape[0]
        # h = o * tc;  tc = tanh(LN(c)):  d LN(c) = d tc (1 - tc^2)
        torch.mul(dh_t, tc, out=d_o[t])
        d_tc = torch.mul(dh_t, og, out=dtcs[t])
        d_cn = torch.mul(d_tc, tc, out=d_cns[t])
        torch.addcmul(d_tc, d_cn, tc, value=-1, out=d_cn)
        mean_c, rstd_c = common.step_stats(stats, 1, t, bs)
        c_ln = c_new[t] if zcs is None else torch.addcmul(forgetgate[t] * c_prev[t], ingate[t],
                                                          cellgate[t])  # the candidate c~_t
        dc_t = _layer_norm_backward(d_cn, c_ln, (H,), mean_c, rstd_c, gain_c, None,
                                    [True, False, False])[0]
        if zcs is None:
            dc_t.add_(dcs[t])
        else:  # dc~_t = ... + (1 - z) dc_t; dc_{t-1} = f dc~_t + z dc_t
            zd_c = dcs[t] * zcs[t]
            dc_t.add_(dcs[t]).sub_(zd_c)
        # c = f c_prev + i u  (u = tanh(pre_u))
        torch.mul(dc_t, cellgate[t], out=d_i[t])
        torch.mul(dc_t, c_prev[t], out=d_f[t])
        torch.mul(dc_t, ingate[t], out=d_u[t])
        torch.mul(dc_t, forgetgate[t], out=dcs[t])
        if zcs is not None:
            dcs[t].add_(zd_c)
        # through the nonlinearities: sigmoid' = s (1 - s), tanh' = 1 - u^2
        act, d_pre = torch.cat([ingate[t], forgetgate[t], outgate[t]], -1), d_pres[t]
        d = derivs[t]
        torch.addcmul(act, act, act, value=-1, out=d[:, :3 * H])
        u = cellgate[t]
        torch.addcmul(torch.ones_like(u), u, u, value=-1, out=d[:, 3 * H:])
        d_pre[:, :2 * H].mul_(d[:, :2 * H])
        d_pre[:, 3 * H:].mul_(d[:, 2 * H:3 * H])
        d_pre[:, 2 * H:3 * H].mul_(d[:, 3 * H:])
        # gates = LN(W_h h_{t-1}) + xg:  d (W_h h_{t-1}) through the LN
        mean_h, rstd_h = common.step_stats(stats, 0, t, bs)
        d_hgs[t].copy_(_layer_norm_backward(d_pre, hgs[t], (G,), mean_h, rstd_h, gain_h, None,
                                            [True, False, False])[0])
        linear_t(d_hgs[t], out=dhs[t])
        if hms is not None:  # the recurrent product read h_{t-1} * h_mask
            dhs[t].mul_(hms[t])
        if zhs is not None:
            dhs[t].add_(zd_h)
    if -1 in blocks:  # length-0 examples: h_n = h0, c_n = c0
        lo, hi = blocks[-1]
        dh[lo:hi] += grad_hn[lo:hi]
        dc[lo:hi] += grad_cn[lo:hi]

    # everything that does not feed the recurrence: one GEMM / one reduction over all steps
    dw_hh = common.dw_hh(dhg, h0, out, h_mask)
    c_ln = cs[1:]
    if zone_c is not None:  # the LN of c read the candidates c~_t (0 on padded rows)
        c_ln = torch.addcmul(act_all[..., H:2 * H] * cs[:-1], act_all[..., :H],
                             act_all[..., 2 * H:3 * H])
    st = lambda k: stats[k].unsqueeze(-1)  # noqa: E731  (T, B, 1), 0 on padded rows
    _, dgain_h, dbias_h = _layer_norm_backward(dxg, hg_all, (G,), st(0), st(1), gain_h, gain_h,
                                               [False, True, True])
    _, dgain_c, dbias_c = _layer_norm_backward(dcn, c_ln, (H,), st(2), st(3), gain_c, gain_c,
                                               [False, True, True])
    dparams = [dgain_h, dbias_h, dgain_c, dbias_c]
    if gain_x is not None:
        dxg, dgain_x, dbias_x = _layer_norm_backward(dxg, xw, (G,), st(4), st(5), gain_x, gain_x,
                                                     [True, True, True])
        dparams += [dgain_x, dbias_x]
    return dxg, dh, dc, dw_hh, torch.cat(dparams)


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
           "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor grad_hn, Tensor grad_cn, Tensor xw, Tensor h0, Tensor w_hh, "
    "Tensor gain_h, Tensor gain_c, Tensor? gain_x, Tensor out, Tensor cs, Tensor hg_all, "
    "Tensor act_all, "
    "Tensor tc_all, Tensor stats, Tensor path, Tensor? batch_sizes, Tensor? h_mask, "
    "Tensor? zone_h, Tensor? zone_c) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")


def _lstm_body(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask, zone_h,
               zone_c, batch_sizes, eps, save):
    """-> out (T, B, H) = [h_1, h_2, ...] (0 past a row's length), h_n, c_n (B, H), the saved
    cs, hg_all, act_all, tc_all, stats (empty without ``save``) and the path taken (1,) int8.
    Rows sorted by decreasing length; ``batch_sizes`` as ``PackedSequence.batch_sizes``;
    ``h_mask``, ``zone_h``, ``zone_c``: the recurrent regularizers or None."""
    return common.forward(_forward_native, _forward_ops, 4, xw, h0, c0, w_hh, gain_h, bias_h,
                          gain_c, bias_c, gain_x, bias_x, h_mask, zone_h, zone_c, batch_sizes,
                          eps, save)


ln_lstm_op = torch.library.custom_op("layernorm::ln_lstm", mutates_args=(), schema=_SCHEMA)(
    _lstm_body)


@ln_lstm_op.register_fake
def _(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, h_mask, zone_h, zone_c,
      batch_sizes, eps, save):
    T, B, G = xw.shape
    H = G // 4
    new, new_stats = common.fake_saved(xw, save)
    return (xw.new_empty(T, B, H), h0.new_empty(B, H), c0.new_empty(B, H), new(T + 1, B, H),
            new(T, B, G), new(T, B, G), new(T, B, H), new_stats(6, T, B),
            torch.empty(1, dtype=torch.int8))


def _lstm_backward_body(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out,
                        cs, hg_all, act_all, tc_all, stats, path, batch_sizes, h_mask, zone_h,
                        zone_c):
    """-> grads of xw (T, B, G), h0, c0, w_hh and the LN parameters as one vector [gain_h,
    bias_h (G each), gain_c, bias_c (H each), gain_x, bias_x (G each, with gain_x)]."""
    args = (grad_out.contiguous(), grad_hn, grad_cn, xw.contiguous(), h0, w_hh, gain_h, gain_c,
            gain_x, out, cs, hg_all, act_all, tc_all, stats, batch_sizes, h_mask, zone_h, zone_c)
    return common.backward("ln_lstm_backward", path, xw, _backward_native, _backward_ops, args)


ln_lstm_backward_op = torch.library.custom_op(
    "layernorm::ln_lstm_backward", mutates_args=(), schema=_BACKWARD_SCHEMA)(_lstm_backward_body)


@ln_lstm_backward_op.register_fake
def _(grad_out, grad_hn, grad_cn, xw, h0, w_hh, gain_h, gain_c, gain_x, out, cs, hg_all, act_all,
      tc_all, stats, path, batch_sizes, h_mask, zone_h, zone_c):
    T, B, G = xw.shape
    H = G // 4
    n = 18 * H if gain_x is not None else 10 * H
    return (xw.new_empty(T, B, G), xw.new_empty(B, H), xw.new_empty(B, H), xw.new_empty(G, H),
            xw.new_empty(n))


def _first_order(inputs, batch_sizes, out, saved, grads):
    xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, *masks = inputs
    T, B, G = xw.shape
    H = G // 4
    grad_out, grad_hn, grad_cn = (xw.new_zeros(shape) if g is None else g for g, shape in
                                  zip(grads, ((T, B, H), (B, H), (B, H))))
    dxw, dh0, dc0, dw_hh, dparams = common.call(
        ln_lstm_backward_op, _lstm_backward_body,
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
    regularized = common.check_masks(who, xg, T, B, H, h_mask=h_mask, zone_h=zone_h,
                                     zone_c=zone_c)
    if _kernels.applies_rnn(xg):  # CUDA: the Triton step kernels (layernorm.kernels)
        masks = {"h_mask": h_mask, "zone_h": zone_h, "zone_c": zone_c} if regularized else {}
        return _kernels.ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c,
                                         _lengths.to_lengths(order, batch_sizes, B), eps, gain_x,
                                         bias_x, **masks)
    compute, out_dtype = common.dtypes(xg)
    masks = common.prepare_masks((h_mask, zone_h, zone_c), compute, order)
    xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x = (
        None if t is None else t.to(compute)
        for t in (xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x))
    params = (w_hh, gain_h, bias_h, gain_c, bias_c)
    if common.under_functorch():  # torch.func transforms: the differentiable loop itself
        sizes = None if batch_sizes is None else batch_sizes.tolist()
        xg, _, _ = common.input_ln(who, xg, gain_x, bias_x, (4 * H,), eps, inside=False)

        def run(xg_, h0_, c0_):
            return _loop(xg_, h0_, c0_, *params, sizes, eps, *masks)
    else:
        common.input_ln(who, xg, gain_x, bias_x, (4 * H,), eps, inside=True)  # checks the pair
        save = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (xg, h0, c0, *params, gain_x, bias_x))

        def run(xg_, h0_, c0_):
            out, h_n, c_n, *_ = _run(xg_, h0_, c0_, *params, gain_x, bias_x, *masks,
                                     batch_sizes, float(eps), save)
            return out, h_n, c_n
    outs = common.with_order(run, order, xg, (h0, c0))
    return tuple(o.to(out_dtype) for o in outs)


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
