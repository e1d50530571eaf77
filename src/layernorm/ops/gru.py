"""The LN-GRU over a whole sequence (one layer, one direction) as the operator
``torch.ops.layernorm.ln_gru`` with the backward ``torch.ops.layernorm.ln_gru_backward``; paths,
second order and torch.func as the LN-LSTM (see ``lstm``)."""
import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import kernels as _kernels
from ..recurrence import lengths as _lengths
from ..recurrence import gru_step, run_direction
from . import common, native
from .common import _WORKSPACE, _Linear, _buffer, _panels
from .native import contig as _contig

_layer_norm, _layer_norm_backward = common._layer_norm, common._layer_norm_backward


def _input_ln_ops(xw, gain_x, bias_x, eps, stats):
    """[LN(xw[:2H]); LN(xw[2H:])] (statistics into stats[4:8] when given)."""
    H = xw.shape[-1] // 3
    parts = []
    for k, (lo, hi) in enumerate(((0, 2 * H), (2 * H, 3 * H))):
        y, mean, rstd = _layer_norm(xw[..., lo:hi], (hi - lo,), gain_x[lo:hi], bias_x[lo:hi], eps)
        if stats is not None:
            stats[4 + 2 * k].copy_(mean.squeeze(-1))
            stats[5 + 2 * k].copy_(rstd.squeeze(-1))
        parts.append(y)
    return torch.cat(parts, -1)


def _forward_ops(xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask, zone_h,
                 batch_sizes, eps, save):
    """The forward loop in torch ops; saves what the C kernel saves: hg_all (T, B, 3H) and the
    statistics (8, T, B) (the backward recomputes the gates from them)."""
    T, B, G = xw.shape
    H = G // 3
    gain_u2, bias_u2 = gain_u * 2, bias_u * 2  # LN(U h) pre-scaled: tanh(a) = 2 sigmoid(2a) - 1
    linear = _Linear(w_hh, B)
    stats = xw.new_zeros(8, T, B, dtype=common.stats_dtype(xw.dtype)) if save else None
    xg = xw if gain_x is None else _input_ln_ops(xw, gain_x, bias_x, eps, stats)

    out = _buffer(T, B, H, like=xw)             # out[t] = h_{t+1}
    hg_all = common.scratch(save, T, B, G, xw)     # [W_h h; U h]
    rz_all = common.scratch(False, T, B, 2 * H, xw)  # sigmoid gates r, z (one step's)
    n_all = common.scratch(False, T, B, H, xw)       # h~ = tanh(...)

    steps = lambda x: common.steps(x, batch_sizes, T)  # noqa: E731
    h_prev, h_new = common.prev_steps(h0, out, batch_sizes, T), steps(out)
    x_rz, x_n = steps(xg[..., :2 * H]), steps(xg[..., 2 * H:])
    hgs, rzs, ns = (steps(a) for a in (hg_all, rz_all, n_all))
    resetgate, updategate = (steps(a) for a in rz_all.split(H, -1))
    hms = None if h_mask is None else common.prefixes(h_mask, batch_sizes, T)
    zhs = None if zone_h is None else steps(zone_h)
    for t in range(common.n_steps(batch_sizes, T)):
        hp = h_prev[t] if hms is None else h_prev[t] * hms[t]    # recurrent dropout
        hg = linear(hp, out=hgs[t])                               # [W_h h; U h]  (B, 3H)
        # r, z = sigmoid(LN(W_h h; g1, b1) + LN(W_x x; g2, b2))      LN over 2H jointly
        a, mean_h, rstd_h = _layer_norm(hg[:, :2 * H], (2 * H,), gain_h, bias_h, eps)
        torch.sigmoid(a.add_(x_rz[t]), out=rzs[t])
        # h~ = tanh(LN(W x; g3, b3) + r * LN(U h; g4, b4))           computed as 2 sigmoid(2 .) - 1
        un2, mean_u, rstd_u = _layer_norm(hg[:, 2 * H:], (H,), gain_u2, bias_u2, eps)
        pre = torch.addcmul(x_n[t], resetgate[t], un2, value=0.5).mul_(2)
        torch.sigmoid(pre, out=ns[t]).mul_(2).sub_(1)
        # h_t = (1 - z) h~ + z h_{t-1}                               torch.nn.GRU's convention
        torch.lerp(ns[t], h_prev[t], updategate[t], out=h_new[t])
        if zhs is not None:  # zoneout: h_t = h~ + z (h_{t-1} - h~)
            h_new[t].lerp_(h_prev[t], zhs[t])
        if save:
            bs = hg.shape[0]
            for k, v in enumerate((mean_h, rstd_h, mean_u, rstd_u)):
                stats[k, t, :bs] = v.squeeze(-1)

    h_n = common.final_state(out, common.row_lengths(batch_sizes, T, B), h0)
    return out, h_n, ([hg_all, stats] if save else None)


def _gates_ops(xw, hg_all, stats, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x):
    """r, z (T, B, 2H), LN(U h) (T, B, H) and h~ (T, B, H) of every step, recomputed from the
    saved W_hh h_{t-1} and LN statistics (finite, unused values on padded rows)."""
    H = xw.shape[-1] // 3
    st = lambda k: stats[k].unsqueeze(-1)  # noqa: E731
    x_rz, x_n = xw[..., :2 * H], xw[..., 2 * H:]
    if gain_x is not None:
        x_rz = (x_rz - st(4)) * st(5) * gain_x[:2 * H] + bias_x[:2 * H]
        x_n = (x_n - st(6)) * st(7) * gain_x[2 * H:] + bias_x[2 * H:]
    rz = torch.sigmoid((hg_all[..., :2 * H] - st(0)) * st(1) * gain_h + bias_h + x_rz)
    un = (hg_all[..., 2 * H:] - st(2)) * st(3) * gain_u + bias_u
    return rz, un, torch.tanh(x_n + rz[..., :H] * un)


def _backward_ops(grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x,
                  bias_x, out, hg_all, stats, batch_sizes, h_mask=None, zone_h=None):
    T, B, G = hg_all.shape
    H = G // 3
    blocks = common.last_steps(common.row_lengths(batch_sizes, T, B), B)
    linear_t = _Linear(w_hh.t(), B)
    rz_all, un_all, n_all = _gates_ops(xw, hg_all, stats, gain_h, bias_h, gain_u, bias_u,
                                       gain_x, bias_x)

    dxg = _buffer(T, B, G, like=hg_all)   # grad of xg: [d(r, z) pre; d n pre]
    dhg = _buffer(T, B, G, like=hg_all)   # grad of [W_h h; U h]
    dun = _buffer(T, B, H, like=hg_all)   # grad of LN(U h)
    dh = grad_hn.new_zeros(B, H)
    dn = hg_all.new_empty(B, H)
    deriv = hg_all.new_empty(B, 2 * H)

    steps = lambda x: common.steps(x, batch_sizes, T)  # noqa: E731
    rows = lambda x: common.prefixes(x, batch_sizes, T)  # noqa: E731
    rzs, ns, uns = steps(rz_all), steps(n_all), steps(un_all)
    h_prev = common.prev_steps(h0, out, batch_sizes, T)
    resetgate, updategate = (steps(a) for a in rz_all.split(H, -1))
    hgs, d_uns, grad_outs = steps(hg_all), steps(dun), steps(grad_out)
    d_rz, d_r, d_z, d_npre = (steps(d) for d in (dxg[..., :2 * H], dxg[..., :H],
                                                 dxg[..., H:2 * H], dxg[..., 2 * H:]))
    d_hrz, d_hu = steps(dhg[..., :2 * H]), steps(dhg[..., 2 * H:])
    d_hgs = steps(dhg)
    dhs, dns, derivs = rows(dh), rows(dn), rows(deriv)
    hms = None if h_mask is None else rows(h_mask)
    zhs = None if zone_h is None else steps(zone_h)
    for t in range(common.n_steps(batch_sizes, T) - 1, -1, -1):
        if t in blocks:
            lo, hi = blocks[t]
            dh[lo:hi] += grad_hn[lo:hi]
        dh_t = dhs[t].add_(grad_outs[t])
        if zhs is not None:  # zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~_t
            zd_h = dh_t * zhs[t]
            dh_t.sub_(zd_h)
        n = ns[t]
        bs = dh_t.shape[0]
        # h = n + z (h_prev - n)
        d_n = torch.mul(dh_t, updategate[t], out=dns[t])     # direct path: dh z
        torch.sub(h_prev[t], n, out=d_z[t]).mul_(dh_t)
        torch.sub(dh_t, d_n, out=d_n)                        # dn = dh (1 - z)
        dh_t.sub_(d_n)
        # n = tanh(npre):  d npre = dn (1 - n^2)
        torch.mul(d_n, n, out=d_npre[t])
        torch.addcmul(d_n, d_npre[t], n, value=-1, out=d_npre[t])
        # npre = xn + r * un
        torch.mul(d_npre[t], uns[t], out=d_r[t])
        torch.mul(d_npre[t], resetgate[t], out=d_uns[t])
        # r, z = sigmoid(.)
        rz = rzs[t]
        torch.addcmul(rz, rz, rz, value=-1, out=derivs[t])
        d_rz[t].mul_(derivs[t])
        mean_h, rstd_h = common.step_stats(stats, 0, t, bs)
        mean_u, rstd_u = common.step_stats(stats, 1, t, bs)
        d_hrz[t].copy_(_layer_norm_backward(d_rz[t], hgs[t][:, :2 * H], (2 * H,), mean_h, rstd_h,
                                            gain_h, None, [True, False, False])[0])
        d_hu[t].copy_(_layer_norm_backward(d_uns[t], hgs[t][:, 2 * H:], (H,), mean_u, rstd_u,
                                           gain_u, None, [True, False, False])[0])
        d_rec = linear_t(d_hgs[t])
        dh_t.add_(d_rec if hms is None else d_rec.mul_(hms[t]))  # the product read h * h_mask
        if zhs is not None:
            dh_t.add_(zd_h)
    if -1 in blocks:  # length-0 examples: h_n = h0
        lo, hi = blocks[-1]
        dh[lo:hi] += grad_hn[lo:hi]

    dw_hh = common.dw_hh(dhg, h0, out, h_mask)
    st = lambda k: stats[k].unsqueeze(-1)  # noqa: E731
    _, dgain_h, dbias_h = _layer_norm_backward(dxg[..., :2 * H].contiguous(), hg_all[..., :2 * H],
                                               (2 * H,), st(0), st(1), gain_h, gain_h,
                                               [False, True, True])
    _, dgain_u, dbias_u = _layer_norm_backward(dun, hg_all[..., 2 * H:], (H,), st(2), st(3),
                                               gain_u, gain_u, [False, True, True])
    dparams = [dgain_h, dbias_h, dgain_u, dbias_u]
    if gain_x is not None:  # through the two input LNs
        dxs, dgs, dbs = [], [], []
        for k, (lo, hi) in enumerate(((0, 2 * H), (2 * H, 3 * H))):
            d, g, b = _layer_norm_backward(dxg[..., lo:hi].contiguous(), xw[..., lo:hi],
                                           (hi - lo,), st(4 + 2 * k), st(5 + 2 * k),
                                           gain_x[lo:hi], gain_x[lo:hi], [True, True, True])
            dxs.append(d)
            dgs.append(g)
            dbs.append(b)
        dxg = torch.cat(dxs, -1)
        dparams += [*dgs, *dbs]
    return dxg, dh, dw_hh, torch.cat(dparams)


def _forward_native(lib, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask,
                    zone_h, batch_sizes, eps, save):
    T, B, G = xw.shape
    H = G // 3
    saved = [None] * 2
    if save:  # hg_all, stats (8, T, B)
        saved = [_WORKSPACE.get(shape, like=xw) for shape in ((T, B, G), (8, T, B))]
    out = _buffer(T, B, H, like=xw, zero=batch_sizes is not None)
    h_n = h0.detach().clone(memory_format=torch.contiguous_format)
    native.call(lib, "gru_forward_seq", native.GRUArgs, "ln_gru_sequence",
                 T=T, B=B, H=H, nthreads=native.threads(B), eps=eps,
                 batch_sizes=native.int32(batch_sizes), xw=xw, gain_x=_contig(gain_x),
                 bias_x=_contig(bias_x), wp=_panels(w_hh, lib.panel_width()),
                 gain_h=_contig(gain_h), bias_h=_contig(bias_h), gain_u=_contig(gain_u),
                 bias_u=_contig(bias_u), h0=_contig(h0), out=out, h_n=h_n, hg_all=saved[0],
                 stats=saved[1], h_mask=_contig(h_mask), zone_h=_contig(zone_h))
    return out, h_n, (saved if save else None)


def _backward_native(lib, grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u,
                     gain_x, bias_x, out, hg_all, stats, batch_sizes, h_mask=None, zone_h=None):
    T, B, G = xw.shape
    H = G // 3
    dxg = _buffer(T, B, G, like=xw, zero=batch_sizes is not None)
    dh = grad_hn.detach().clone(memory_format=torch.contiguous_format)
    dparams = torch.zeros(12 * H, dtype=torch.float64)
    dw_hh = common.native_backward(
        lib, "gru_backward_seq", native.GRUArgs, "ln_gru_sequence", _contig(h0), out,
        batch_sizes, G, T=T, B=B, H=H, nthreads=native.threads(B),
        wtp=_panels(w_hh, lib.panel_width(), transposed=True), xw=xw,
        grad_out=grad_out.contiguous(),
        gain_x=_contig(gain_x), bias_x=_contig(bias_x), gain_h=_contig(gain_h),
        bias_h=_contig(bias_h), gain_u=_contig(gain_u), bias_u=_contig(bias_u), hg_all=hg_all,
        stats=stats, dh=dh, dxg=dxg, dparams=dparams, h_mask=_contig(h_mask),
        zone_h=_contig(zone_h))
    n = 12 * H if gain_x is not None else 6 * H
    return dxg, dh, dw_hh, dparams[:n].to(xw.dtype)


_SCHEMA = ("(Tensor xw, Tensor h0, Tensor w_hh, Tensor gain_h, Tensor bias_h, Tensor gain_u, "
           "Tensor bias_u, Tensor? gain_x, Tensor? bias_x, Tensor? h_mask, Tensor? zone_h, "
           "Tensor? batch_sizes, float eps, bool save) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor grad_hn, Tensor xw, Tensor h0, Tensor w_hh, Tensor gain_h, "
    "Tensor bias_h, Tensor gain_u, Tensor bias_u, Tensor? gain_x, Tensor? bias_x, Tensor out, "
    "Tensor hg_all, Tensor stats, Tensor path, Tensor? batch_sizes, Tensor? h_mask, "
    "Tensor? zone_h) -> (Tensor, Tensor, Tensor, Tensor)")


def _gru_body(xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask, zone_h,
              batch_sizes, eps, save):
    """-> out (T, B, H), h_n (B, H), the saved hg_all, stats (empty without ``save``) and the
    path taken (1,) int8. Rows sorted by decreasing length; ``h_mask``, ``zone_h``: the
    recurrent regularizers or None."""
    return common.forward(_forward_native, _forward_ops, 1, xw, h0, w_hh, gain_h, bias_h, gain_u,
                        bias_u, gain_x, bias_x, h_mask, zone_h, batch_sizes, eps, save)


ln_gru_op = torch.library.custom_op("layernorm::ln_gru", mutates_args=(), schema=_SCHEMA)(
    _gru_body)


@ln_gru_op.register_fake
def _(xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, h_mask, zone_h, batch_sizes,
      eps, save):
    T, B, G = xw.shape
    H = G // 3
    new, new_stats = common.fake_saved(xw, save)
    return (xw.new_empty(T, B, H), h0.new_empty(B, H), new(T, B, G), new_stats(8, T, B),
            torch.empty(1, dtype=torch.int8))


def _gru_backward_body(grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x,
                       bias_x, out, hg_all, stats, path, batch_sizes, h_mask, zone_h):
    """-> grads of xw, h0, w_hh and the LN parameters as one vector [gain_h, bias_h (2H each),
    gain_u, bias_u (H each), gain_x, bias_x (3H each, with gain_x)]."""
    args = (grad_out.contiguous(), grad_hn, xw.contiguous(), h0, w_hh, gain_h, bias_h, gain_u,
            bias_u, gain_x, bias_x, out, hg_all, stats, batch_sizes, h_mask, zone_h)
    return common.backward("ln_gru_backward", path, xw, _backward_native, _backward_ops, args)


ln_gru_backward_op = torch.library.custom_op(
    "layernorm::ln_gru_backward", mutates_args=(), schema=_BACKWARD_SCHEMA)(_gru_backward_body)


@ln_gru_backward_op.register_fake
def _(grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, out,
      hg_all, stats, path, batch_sizes, h_mask, zone_h):
    T, B, G = xw.shape
    H = G // 3
    n = 12 * H if gain_x is not None else 6 * H
    return xw.new_empty(T, B, G), xw.new_empty(B, H), xw.new_empty(G, H), xw.new_empty(n)


def _first_order(inputs, batch_sizes, out, saved, grads):
    xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, *masks = inputs
    T, B, G = xw.shape
    H = G // 3
    grad_out = xw.new_zeros(T, B, H) if grads[0] is None else grads[0]
    grad_hn = xw.new_zeros(B, H) if grads[1] is None else grads[1]
    dxw, dh0, dw_hh, dparams = common.call(
        ln_gru_backward_op, _gru_backward_body,
        grad_out, grad_hn, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, out,
        *saved, batch_sizes, *masks)
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


_run = common.register_autograd(ln_gru_op, _gru_body, "ln_gru", 2, _loop_with_input_ln,
                              _first_order)


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
    T, B, H = common.check_shapes(who, xg, {"h0": h0}, w_hh, 3, vectors)
    order, batch_sizes = _lengths.encode(who, lengths, batch_sizes, T, B)  # the one check
    regularized = common.check_masks(who, xg, T, B, H, h_mask=h_mask, zone_h=zone_h)
    if _kernels.applies_rnn(xg):  # CUDA: the Triton step kernels (layernorm.kernels)
        masks = {"h_mask": h_mask, "zone_h": zone_h} if regularized else {}
        return _kernels.ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u,
                                        _lengths.to_lengths(order, batch_sizes, B), eps, gain_x,
                                        bias_x, **masks)
    compute, out_dtype = common.dtypes(xg)
    masks = common.prepare_masks((h_mask, zone_h), compute, order)
    xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x = (
        None if t is None else t.to(compute)
        for t in (xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x))
    params = (w_hh, gain_h, bias_h, gain_u, bias_u)
    if common.under_functorch():
        sizes = None if batch_sizes is None else batch_sizes.tolist()
        xg, _, _ = common.input_ln(who, xg, gain_x, bias_x, (2 * H, H), eps, inside=False)

        def run(xg_, h0_):
            return _loop(xg_, h0_, *params, sizes, eps, *masks)
    else:
        common.input_ln(who, xg, gain_x, bias_x, (2 * H, H), eps, inside=True)
        save = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (xg, h0, *params, gain_x, bias_x))

        def run(xg_, h0_):
            out, h_n, *_ = _run(xg_, h0_, *params, gain_x, bias_x, *masks, batch_sizes,
                                float(eps), save)
            return out, h_n
    outs = common.with_order(run, order, xg, (h0,))
    return tuple(o.to(out_dtype) for o in outs)


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
        lib = native.native_lib(xw)
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
        lib = native.native_lib(xw)
        H = h0.shape[-1]
        dxw, dh0, dw_hh, dparams = _backward_native(
            lib, grad_out.contiguous(), grad_hn, xw.contiguous(), h0, w_hh, None, None, None,
            bias_u, None, None, out, *saved, batch_sizes)
        return dxw, dh0, dw_hh, dparams[5 * H:6 * H], None, None


def plain_gru_sequence(xw: Tensor, h0: Tensor, w_hh: Tensor, bias_u: Tensor,
                       batch_sizes: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """torch.nn.GRU's recurrence for one layer and direction (no normalization) in the C
    kernels, where ``ops.lstm.plain_applies``::

        r, z = sigmoid(xw_t[:2H] + W_h h_{t-1})    xw = W_x x + b_ih + [b_hr; b_hz; 0]
        n = tanh(xw_t[2H:] + r (U h_{t-1} + b_hn))   (bias_u = b_hn),  h_t = n + z (h_{t-1} - n)

    xw (T, B, 3H), h0 (B, H), w_hh (3H, H) = [W_h; U], bias_u (H,); ``batch_sizes`` as
    ``plain_lstm_sequence``'s. Differentiable to any order."""
    from .lstm import plain_applies
    if not plain_applies(xw, h0, w_hh, bias_u):
        raise RuntimeError("plain_gru_sequence needs eager CPU float32 tensors and the C "
                           "kernels (see ops.lstm.plain_applies); call torch's GRU op otherwise.")
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (xw, h0, w_hh, bias_u))
    return _PlainGRU.apply(xw, h0, w_hh, bias_u, batch_sizes, save)


# The Triton kernels' second order differentiates this operator's reference loop.
_kernels.REFERENCE["gru"] = functools.partial(common.reference_grads, _loop_with_input_ln, 1)
