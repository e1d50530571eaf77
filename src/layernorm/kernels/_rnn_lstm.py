"""LN-LSTM on CUDA: the forward and backward step kernels (one program per example), the host loop
around them (per step one ``torch.mm`` and one kernel launch) and the autograd Function; the
scheme is described in ``layernorm.kernels._rnn``. Gate order i, f, u, o; the raw cell state is
carried in float32. The recurrent regularizers (docs/rnn.md): recurrent dropout multiplies h_{t-1}
before the step's GEMM (and the GEMM's gradient into h_{t-1}); zoneout mixes the candidate state
with the previous one in the step kernels (HAS_ZH / HAS_ZC), the LN of c reading the candidate
c~_t, which the backward recomputes from its gates."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._norms import LAUNCH
from ._rnn_common import (_acc, _block, _c, _center, _center4, _check_pairs, _dh_in, _ld, _lengths,
                          _ln_backward1, _masks, _tanh, _xhat, reference_grads)


@triton.jit(do_not_specialize=["t", "hg_slot", "c_in", "c_out"])  # one compile for all steps
def _lstm_forward_step(HG, XW, HS, CS, OUT, STATS, LEN, GH, BH, GC, BC, GX, BX, ZH, ZC,
                       t, hg_slot, c_in, c_out, B, H, eps,
                       HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, SAVE: tl.constexpr,
                       HAS_ZH: tl.constexpr, HAS_ZC: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    m = cols < H
    G = 4 * H
    # gates = LN(W_h h_{t-1}; g1, b1) + xg_t               LN over all 4H gates jointly
    hg = HG + (hg_slot * B + b) * G
    a_i, a_f, a_u, a_o = _ld(hg, cols, m), _ld(hg + H, cols, m), _ld(hg + 2 * H, cols, m), \
        _ld(hg + 3 * H, cols, m)
    a_i, a_f, a_u, a_o, mu_h, rs_h = _center4(a_i, a_f, a_u, a_o, m, H, eps)
    xw = XW + (t * B + b) * G
    x_i, x_f, x_u, x_o = _ld(xw, cols, m), _ld(xw + H, cols, m), _ld(xw + 2 * H, cols, m), \
        _ld(xw + 3 * H, cols, m)
    if HAS_XLN:  # xg_t = LN(W_x x_t; g2, b2), here
        x_i, x_f, x_u, x_o, mu_x, rs_x = _center4(x_i, x_f, x_u, x_o, m, H, eps)
        x_i = x_i * rs_x * _ld(GX, cols, m) + _ld(BX, cols, m)
        x_f = x_f * rs_x * _ld(GX + H, cols, m) + _ld(BX + H, cols, m)
        x_u = x_u * rs_x * _ld(GX + 2 * H, cols, m) + _ld(BX + 2 * H, cols, m)
        x_o = x_o * rs_x * _ld(GX + 3 * H, cols, m) + _ld(BX + 3 * H, cols, m)
    ingate = tl.sigmoid(a_i * rs_h * _ld(GH, cols, m) + _ld(BH, cols, m) + x_i)
    forgetgate = tl.sigmoid(a_f * rs_h * _ld(GH + H, cols, m) + _ld(BH + H, cols, m) + x_f)
    cellgate = _tanh(a_u * rs_h * _ld(GH + 2 * H, cols, m) + _ld(BH + 2 * H, cols, m) + x_u)
    outgate = tl.sigmoid(a_o * rs_h * _ld(GH + 3 * H, cols, m) + _ld(BH + 3 * H, cols, m) + x_o)
    # c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u);  h_t = sigmoid(o) tanh(LN(c_t; g3, b3))
    c_prev = _ld(CS + (c_in * B + b) * H, cols, m)
    c = tl.where(m, forgetgate * c_prev + ingate * cellgate, 0.0)
    d_c, mu_c, rs_c = _center(c, m, H, eps)
    h = outgate * _tanh(d_c * rs_c * _ld(GC, cols, m) + _ld(BC, cols, m))
    if HAS_ZH:  # zoneout: h_t = h~ + z (h_{t-1} - h~)
        h = h + _ld(ZH + (t * B + b) * H, cols, m) * (_ld(HS + (t * B + b) * H, cols, m) - h)
    if HAS_ZC:
        c = c + _ld(ZC + (t * B + b) * H, cols, m) * (c_prev - c)
    if HAS_LEN:  # past its length an example keeps its state and outputs 0
        live = t < tl.load(LEN + b)
        h_prev = _ld(HS + (t * B + b) * H, cols, m)
        tl.store(OUT + (t * B + b) * H + cols, tl.where(live, h, 0.0).to(OUT.dtype.element_ty),
                 mask=m)
        h = tl.where(live, h, h_prev)
        c = tl.where(live, c, c_prev)
    tl.store(HS + ((t + 1) * B + b) * H + cols, h.to(HS.dtype.element_ty), mask=m)
    tl.store(CS + (c_out * B + b) * H + cols, c, mask=m)
    if SAVE:
        st = STATS + (t * B + b) * 6
        tl.store(st, mu_h)
        tl.store(st + 1, rs_h)
        tl.store(st + 2, mu_c)
        tl.store(st + 3, rs_c)
        if HAS_XLN:
            tl.store(st + 4, mu_x)
            tl.store(st + 5, rs_x)


@triton.jit
def _ln_backward4(d_i, d_f, d_u, d_o, x_i, x_f, x_u, x_o, G_, rs, cols, m, H, n):
    """d(input) of an LN over the 4 H-blocks jointly: rs (w dy - xhat mean(w dy xhat) -
    mean(w dy)), with w the gain, xhat the normalized input."""
    w_i = d_i * _ld(G_, cols, m)
    w_f = d_f * _ld(G_ + H, cols, m)
    w_u = d_u * _ld(G_ + 2 * H, cols, m)
    w_o = d_o * _ld(G_ + 3 * H, cols, m)
    c1 = (tl.sum(w_i * x_i, 0) + tl.sum(w_f * x_f, 0) + tl.sum(w_u * x_u, 0)
          + tl.sum(w_o * x_o, 0)) / n
    c2 = (tl.sum(w_i, 0) + tl.sum(w_f, 0) + tl.sum(w_u, 0) + tl.sum(w_o, 0)) / n
    return ((w_i - x_i * c1 - c2) * rs, (w_f - x_f * c1 - c2) * rs,
            (w_u - x_u * c1 - c2) * rs, (w_o - x_o * c1 - c2) * rs)


@triton.jit(do_not_specialize=["t"])  # one compile for all steps
def _lstm_backward_step(HG, XW, CS, STATS, LEN, GOUT, DH, DHMM, DC, DHG, DXG, ACC,
                        GH, BH, GC, BC, GX, BX, ZH, ZC, t, B, H,
                        HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, HAS_DHMM: tl.constexpr,
                        HAS_ZH: tl.constexpr, HAS_ZC: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    m = cols < H
    G = 4 * H
    row = t * B + b
    dh = _dh_in(GOUT + row * H, DH + b * H, DHMM + b * H, LEN, t, b, cols, m, HAS_LEN, HAS_DHMM)
    if HAS_LEN:
        live = t < tl.load(LEN + b)
    dc = _ld(DC + b * H, cols, m)
    # recompute the step from what the forward kept
    st = STATS + row * 6
    mu_h, rs_h, mu_c, rs_c = tl.load(st), tl.load(st + 1), tl.load(st + 2), tl.load(st + 3)
    hg = HG + row * G
    xh_i = _xhat(_ld(hg, cols, m), mu_h, rs_h, m)
    xh_f = _xhat(_ld(hg + H, cols, m), mu_h, rs_h, m)
    xh_u = _xhat(_ld(hg + 2 * H, cols, m), mu_h, rs_h, m)
    xh_o = _xhat(_ld(hg + 3 * H, cols, m), mu_h, rs_h, m)
    xw = XW + row * G
    x_i, x_f, x_u, x_o = _ld(xw, cols, m), _ld(xw + H, cols, m), _ld(xw + 2 * H, cols, m), \
        _ld(xw + 3 * H, cols, m)
    if HAS_XLN:
        mu_x, rs_x = tl.load(st + 4), tl.load(st + 5)
        xx_i = _xhat(x_i, mu_x, rs_x, m)
        xx_f = _xhat(x_f, mu_x, rs_x, m)
        xx_u = _xhat(x_u, mu_x, rs_x, m)
        xx_o = _xhat(x_o, mu_x, rs_x, m)
        x_i = xx_i * _ld(GX, cols, m) + _ld(BX, cols, m)
        x_f = xx_f * _ld(GX + H, cols, m) + _ld(BX + H, cols, m)
        x_u = xx_u * _ld(GX + 2 * H, cols, m) + _ld(BX + 2 * H, cols, m)
        x_o = xx_o * _ld(GX + 3 * H, cols, m) + _ld(BX + 3 * H, cols, m)
    ingate = tl.sigmoid(xh_i * _ld(GH, cols, m) + _ld(BH, cols, m) + x_i)
    forgetgate = tl.sigmoid(xh_f * _ld(GH + H, cols, m) + _ld(BH + H, cols, m) + x_f)
    cellgate = _tanh(xh_u * _ld(GH + 2 * H, cols, m) + _ld(BH + 2 * H, cols, m) + x_u)
    outgate = tl.sigmoid(xh_o * _ld(GH + 3 * H, cols, m) + _ld(BH + 3 * H, cols, m) + x_o)
    c_prev = _ld(CS + row * H, cols, m)
    if HAS_ZC:  # the LN read the candidate c~_t (CS holds the zoned-out c_t)
        xh_c = _xhat(forgetgate * c_prev + ingate * cellgate, mu_c, rs_c, m)
    else:
        xh_c = _xhat(_ld(CS + (row + B) * H, cols, m), mu_c, rs_c, m)
    g_c = _ld(GC, cols, m)
    tc = _tanh(xh_c * g_c + _ld(BC, cols, m))
    dh_in = dh
    dh_direct = tl.zeros([BLOCK_H], dtype=tl.float32)
    if HAS_ZH:  # zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~_t
        dh_direct = _ld(ZH + row * H, cols, m) * dh_in
        dh = dh - dh_direct
    # h = o tanh(LN(c)):  d LN(c) = dh o (1 - tc^2), then through the LN over H
    d_o = dh * tc * outgate * (1.0 - outgate)
    d_cn = dh * outgate * (1.0 - tc * tc)
    w_c = d_cn * g_c
    if HAS_ZC:  # z dc_t to c_{t-1}, (1 - z) dc_t to the candidate c~_t
        dct = dc - _ld(ZC + row * H, cols, m) * dc + _ln_backward1(w_c, xh_c, rs_c, H)
    else:
        dct = dc + _ln_backward1(w_c, xh_c, rs_c, H)
    # c = f c_prev + i u
    d_i = dct * cellgate * ingate * (1.0 - ingate)
    d_f = dct * c_prev * forgetgate * (1.0 - forgetgate)
    d_u = dct * ingate * (1.0 - cellgate * cellgate)
    d_i, d_f = tl.where(m, d_i, 0.0), tl.where(m, d_f, 0.0)
    d_u, d_o = tl.where(m, d_u, 0.0), tl.where(m, d_o, 0.0)
    # gates = LN(hg) + xg: d hg through the LN over 4H
    dg_i, dg_f, dg_u, dg_o = _ln_backward4(d_i, d_f, d_u, d_o, xh_i, xh_f, xh_u, xh_o, GH, rs_h,
                                           cols, m, H, G)
    if HAS_XLN:
        dx_i, dx_f, dx_u, dx_o = _ln_backward4(d_i, d_f, d_u, d_o, xx_i, xx_f, xx_u, xx_o, GX,
                                               rs_x, cols, m, H, G)
    else:
        dx_i, dx_f, dx_u, dx_o = d_i, d_f, d_u, d_o
    dc_prev = dct * forgetgate
    if HAS_ZC:
        dc_prev += _ld(ZC + row * H, cols, m) * dc
    if HAS_LEN:  # past its length: the state's gradient passes through, the step has none
        dh_direct = tl.where(live, dh_direct, dh_in)
        dc_prev = tl.where(live, dc_prev, dc)
        d_i, d_f = tl.where(live, d_i, 0.0), tl.where(live, d_f, 0.0)
        d_u, d_o = tl.where(live, d_u, 0.0), tl.where(live, d_o, 0.0)
        d_cn = tl.where(live, d_cn, 0.0)
        dg_i, dg_f = tl.where(live, dg_i, 0.0), tl.where(live, dg_f, 0.0)
        dg_u, dg_o = tl.where(live, dg_u, 0.0), tl.where(live, dg_o, 0.0)
        dx_i, dx_f = tl.where(live, dx_i, 0.0), tl.where(live, dx_f, 0.0)
        dx_u, dx_o = tl.where(live, dx_u, 0.0), tl.where(live, dx_o, 0.0)
    tl.store(DH + b * H + cols, dh_direct, mask=m)
    tl.store(DC + b * H + cols, dc_prev, mask=m)
    ty = DHG.dtype.element_ty
    dhg = DHG + row * G
    tl.store(dhg + cols, dg_i.to(ty), mask=m)
    tl.store(dhg + H + cols, dg_f.to(ty), mask=m)
    tl.store(dhg + 2 * H + cols, dg_u.to(ty), mask=m)
    tl.store(dhg + 3 * H + cols, dg_o.to(ty), mask=m)
    dxg = DXG + row * G
    tl.store(dxg + cols, dx_i.to(ty), mask=m)
    tl.store(dxg + H + cols, dx_f.to(ty), mask=m)
    tl.store(dxg + 2 * H + cols, dx_u.to(ty), mask=m)
    tl.store(dxg + 3 * H + cols, dx_o.to(ty), mask=m)
    # LN parameter grads of this row, float32: [g_h 4H | b_h 4H | g_c H | b_c H | g_x 4H | b_x 4H]
    acc = ACC + b * (18 * H)
    _acc(acc, cols, m, d_i * xh_i)
    _acc(acc + H, cols, m, d_f * xh_f)
    _acc(acc + 2 * H, cols, m, d_u * xh_u)
    _acc(acc + 3 * H, cols, m, d_o * xh_o)
    _acc(acc + 4 * H, cols, m, d_i)
    _acc(acc + 5 * H, cols, m, d_f)
    _acc(acc + 6 * H, cols, m, d_u)
    _acc(acc + 7 * H, cols, m, d_o)
    _acc(acc + 8 * H, cols, m, d_cn * xh_c)
    _acc(acc + 9 * H, cols, m, d_cn)
    if HAS_XLN:
        _acc(acc + 10 * H, cols, m, d_i * xx_i)
        _acc(acc + 11 * H, cols, m, d_f * xx_f)
        _acc(acc + 12 * H, cols, m, d_u * xx_u)
        _acc(acc + 13 * H, cols, m, d_o * xx_o)
        _acc(acc + 14 * H, cols, m, d_i)
        _acc(acc + 15 * H, cols, m, d_f)
        _acc(acc + 16 * H, cols, m, d_u)
        _acc(acc + 17 * H, cols, m, d_o)


def _lstm_forward(xg, h0, c0, w_hh, params, lens, eps, save: bool, masks=(None, None, None)):
    """-> out, h_n, c_n, saved (hg_all, hs, cs, stats) or None. ``masks``: h_mask (B, H),
    zone_h, zone_c (T, B, H) or None each."""
    T, B, G = xg.shape
    H = G // 4
    gh, bh, gc, bc, gx, bx = params
    has_xln = gx is not None
    block, warps = _block(H)
    wt = w_hh.detach().t()
    hs = xg.new_empty(T + 1, B, H)
    hs[0] = h0
    cs = torch.empty(T + 1 if save else 2, B, H, dtype=torch.float32, device=xg.device)
    cs[0] = c0
    hg_all = xg.new_empty(T if save else 1, B, G)
    stats = torch.empty(T if save else 1, B, 6, dtype=torch.float32, device=xg.device)
    out = xg.new_empty(T, B, H) if lens is not None else hs[1:]
    h_mask, zone_h, zone_c = masks
    for t in range(T):
        slot = t if save else 0
        h_in = hs[t] if h_mask is None else hs[t] * h_mask          # recurrent dropout
        torch.mm(h_in, wt, out=hg_all[slot])                       # W_h h_{t-1}   (B, 4H)
        c_in, c_out = (t, t + 1) if save else (t % 2, (t + 1) % 2)  # cs: (T+1) or 2 slots
        _lstm_forward_step[(B,)](
            hg_all, xg, hs, cs, out, stats, lens if lens is not None else hs,
            gh, bh, gc, bc, gx if has_xln else gh, bx if has_xln else bh,
            hs if zone_h is None else zone_h, hs if zone_c is None else zone_c,
            t, slot, c_in, c_out, B, H, eps,
            HAS_LEN=lens is not None, HAS_XLN=has_xln, SAVE=save, HAS_ZH=zone_h is not None,
            HAS_ZC=zone_c is not None, BLOCK_H=block, num_warps=warps, **LAUNCH)
    h_n = hs[T].clone()
    c_n = cs[T if save else T % 2].to(xg.dtype, copy=True)
    return out, h_n, c_n, ((hg_all, hs, cs, stats) if save else None)


class _LSTMFunction(torch.autograd.Function):
    """Differentiable to any order: the backward runs the Triton step kernels, and under
    ``create_graph=True`` the reference recurrence (``_rnn_common.reference_grads``)."""

    @staticmethod
    def forward(ctx, xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, lens,
                eps, h_mask=None, zone_h=None, zone_c=None):
        inputs = (xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x)
        params = tuple(_c(p) for p in inputs[4:])
        masks = (h_mask, zone_h, zone_c)
        out, h_n, c_n, (hg_all, hs, cs, stats) = _lstm_forward(xg, h0, c0, w_hh, params, lens,
                                                               eps, True, masks)
        ctx.masks, ctx.eps = masks, eps
        ctx.save_for_backward(hg_all, hs, cs, stats, *inputs)
        ctx.lens, ctx.dtypes = lens, [None if p is None else p.dtype for p in inputs[4:]]
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, grad_out, grad_hn, grad_cn):
        hg_all, hs, cs, stats, *inputs = ctx.saved_tensors
        if torch.is_grad_enabled():     # create_graph=True: a backward autograd can differentiate
            found = reference_grads("lstm", tuple(inputs), ctx.lens, ctx.eps, ctx.masks,
                                    ctx.needs_input_grad[:10], (grad_out, grad_hn, grad_cn))
            return (*found, None, None, None, None, None)
        xg, w_hh = inputs[0], inputs[3]
        gh, bh, gc, bc, gx, bx = (_c(p) for p in inputs[4:])
        lens = ctx.lens
        T, B, G = xg.shape
        H = G // 4
        has_xln = gx is not None
        block, warps = _block(H)
        grad_out = grad_out.contiguous()
        dh = grad_hn.float().contiguous().clone()   # direct part of dh_t
        dc = grad_cn.float().contiguous().clone()
        dhmm = xg.new_zeros(B, H)                    # d(hg_{t+1}) @ W_hh
        dhg = xg.new_empty(T, B, G)
        dxg = xg.new_empty(T, B, G)
        acc = torch.zeros(B, 18 * H, dtype=torch.float32, device=xg.device)
        w = w_hh.detach()
        h_mask, zone_h, zone_c = ctx.masks
        for t in range(T - 1, -1, -1):
            _lstm_backward_step[(B,)](
                hg_all, xg, cs, stats, lens if lens is not None else dh, grad_out, dh, dhmm, dc,
                dhg, dxg, acc, gh, bh, gc, bc, gx if has_xln else gh, bx if has_xln else bh,
                dh if zone_h is None else zone_h, dh if zone_c is None else zone_c,
                t, B, H, HAS_LEN=lens is not None, HAS_XLN=has_xln, HAS_DHMM=t < T - 1,
                HAS_ZH=zone_h is not None, HAS_ZC=zone_c is not None,
                BLOCK_H=block, num_warps=warps, **LAUNCH)
            torch.mm(dhg[t], w, out=dhmm)                          # through W_h h_{t-1}
            if h_mask is not None:                                 # which read h * h_mask
                dhmm.mul_(h_mask)
        dh0 = (dh + dhmm.float()).to(hs.dtype)
        h_in = hs[:T] if h_mask is None else hs[:T] * h_mask
        dw_hh = torch.mm(dhg.view(T * B, G).t(), h_in.reshape(T * B, H))
        g = acc.sum(0)
        dgh, dbh, dgc, dbc, dgx, dbx = g.split([G, G, H, H, G, G])
        grads = [v.to(dt) if dt is not None else None for v, dt in
                 zip((dgh, dbh, dgc, dbc, dgx, dbx), ctx.dtypes)]
        return (dxg, dh0, dc.to(hs.dtype), dw_hh.to(w_hh.dtype), *grads, None, None, None, None,
                None)


def ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, lengths=None,
                     eps: float = 1e-5, gain_x=None, bias_x=None, *, h_mask=None, zone_h=None,
                     zone_c=None):
    _check_pairs("ln_lstm_sequence", gain_x, bias_x)
    T, B, _ = xg.shape
    lens = _lengths(lengths, T, B, xg.device)
    xg = xg.contiguous()
    masks = _masks(xg, h_mask, zone_h, zone_c)
    tensors = (xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors):
        return _LSTMFunction.apply(*tensors, lens, eps, *masks)
    with torch.no_grad():
        params = tuple(_c(p) for p in tensors[4:])
        return _lstm_forward(xg, h0, c0, w_hh, params, lens, eps, False, masks)[:3]
