"""LN-GRU on CUDA: the forward and backward step kernels (one program per example), the host loop
around them (per step one ``torch.mm`` and one kernel launch) and the autograd Function; the
scheme is described in ``layernorm.kernels._rnn``. Gate order r, z, n (torch.nn.GRU's z). The
recurrent regularizers as the LN-LSTM's (``_rnn_lstm``): h_mask before the GEMM, zoneout of h in
the step kernels (HAS_ZH)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._norms import LAUNCH
from ._rnn_common import (_acc, _block, _c, _center, _center2, _check_pairs, _dh_in, _ld, _lengths,
                          _ln_backward1, _masks, _tanh, _xhat, reference_grads)


@triton.jit(do_not_specialize=["t", "hg_slot"])  # one compile for all steps
def _gru_forward_step(HG, XW, HS, OUT, STATS, LEN, GH, BH, GU, BU, GX, BX, ZH,
                      t, hg_slot, B, H, eps,
                      HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, SAVE: tl.constexpr,
                      HAS_ZH: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    m = cols < H
    G = 3 * H
    # r, z = sigmoid(LN(W_h h; g1, b1) + xg_t[:2H])       LN over 2H jointly
    hg = HG + (hg_slot * B + b) * G
    a_r, a_z, a_n = _ld(hg, cols, m), _ld(hg + H, cols, m), _ld(hg + 2 * H, cols, m)
    a_r, a_z, mu_h, rs_h = _center2(a_r, a_z, m, H, eps)
    a_n, mu_u, rs_u = _center(a_n, m, H, eps)
    xw = XW + (t * B + b) * G
    x_r, x_z, x_n = _ld(xw, cols, m), _ld(xw + H, cols, m), _ld(xw + 2 * H, cols, m)
    if HAS_XLN:  # [LN(W_x x_t; g2, b2) over 2H | LN(W x_t; g3, b3) over H], here
        x_r, x_z, mu_x, rs_x = _center2(x_r, x_z, m, H, eps)
        x_n, mu_xn, rs_xn = _center(x_n, m, H, eps)
        x_r = x_r * rs_x * _ld(GX, cols, m) + _ld(BX, cols, m)
        x_z = x_z * rs_x * _ld(GX + H, cols, m) + _ld(BX + H, cols, m)
        x_n = x_n * rs_xn * _ld(GX + 2 * H, cols, m) + _ld(BX + 2 * H, cols, m)
    resetgate = tl.sigmoid(a_r * rs_h * _ld(GH, cols, m) + _ld(BH, cols, m) + x_r)
    updategate = tl.sigmoid(a_z * rs_h * _ld(GH + H, cols, m) + _ld(BH + H, cols, m) + x_z)
    # h~ = tanh(xg_t[2H:] + r LN(U h; g4, b4));  h_t = (1 - z) h~ + z h_{t-1}
    un = a_n * rs_u * _ld(GU, cols, m) + _ld(BU, cols, m)
    newgate = _tanh(x_n + resetgate * un)
    h_prev = _ld(HS + (t * B + b) * H, cols, m)
    h = newgate + updategate * (h_prev - newgate)
    if HAS_ZH:  # zoneout: h_t = h~ + z (h_{t-1} - h~)
        h = h + _ld(ZH + (t * B + b) * H, cols, m) * (h_prev - h)
    if HAS_LEN:
        live = t < tl.load(LEN + b)
        tl.store(OUT + (t * B + b) * H + cols, tl.where(live, h, 0.0).to(OUT.dtype.element_ty),
                 mask=m)
        h = tl.where(live, h, h_prev)
    tl.store(HS + ((t + 1) * B + b) * H + cols, h.to(HS.dtype.element_ty), mask=m)
    if SAVE:
        st = STATS + (t * B + b) * 8
        tl.store(st, mu_h)
        tl.store(st + 1, rs_h)
        tl.store(st + 2, mu_u)
        tl.store(st + 3, rs_u)
        if HAS_XLN:
            tl.store(st + 4, mu_x)
            tl.store(st + 5, rs_x)
            tl.store(st + 6, mu_xn)
            tl.store(st + 7, rs_xn)


@triton.jit(do_not_specialize=["t"])  # one compile for all steps
def _gru_backward_step(HG, XW, HS, STATS, LEN, GOUT, DH, DHMM, DHG, DXG, ACC,
                       GH, BH, GU, BU, GX, BX, ZH, t, B, H,
                       HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, HAS_DHMM: tl.constexpr,
                       HAS_ZH: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    m = cols < H
    G = 3 * H
    row = t * B + b
    dh = _dh_in(GOUT + row * H, DH + b * H, DHMM + b * H, LEN, t, b, cols, m, HAS_LEN, HAS_DHMM)
    if HAS_LEN:
        live = t < tl.load(LEN + b)
    st = STATS + row * 8
    mu_h, rs_h, mu_u, rs_u = tl.load(st), tl.load(st + 1), tl.load(st + 2), tl.load(st + 3)
    hg = HG + row * G
    xh_r = _xhat(_ld(hg, cols, m), mu_h, rs_h, m)
    xh_z = _xhat(_ld(hg + H, cols, m), mu_h, rs_h, m)
    xh_n = _xhat(_ld(hg + 2 * H, cols, m), mu_u, rs_u, m)
    xw = XW + row * G
    x_r, x_z, x_n = _ld(xw, cols, m), _ld(xw + H, cols, m), _ld(xw + 2 * H, cols, m)
    if HAS_XLN:
        mu_x, rs_x, mu_xn, rs_xn = tl.load(st + 4), tl.load(st + 5), tl.load(st + 6), \
            tl.load(st + 7)
        xx_r = _xhat(x_r, mu_x, rs_x, m)
        xx_z = _xhat(x_z, mu_x, rs_x, m)
        xx_n = _xhat(x_n, mu_xn, rs_xn, m)
        x_r = xx_r * _ld(GX, cols, m) + _ld(BX, cols, m)
        x_z = xx_z * _ld(GX + H, cols, m) + _ld(BX + H, cols, m)
        x_n = xx_n * _ld(GX + 2 * H, cols, m) + _ld(BX + 2 * H, cols, m)
    g_r, g_z = _ld(GH, cols, m), _ld(GH + H, cols, m)
    resetgate = tl.sigmoid(xh_r * g_r + _ld(BH, cols, m) + x_r)
    updategate = tl.sigmoid(xh_z * g_z + _ld(BH + H, cols, m) + x_z)
    g_u = _ld(GU, cols, m)
    un = xh_n * g_u + _ld(BU, cols, m)
    newgate = _tanh(x_n + resetgate * un)
    h_prev = _ld(HS + row * H, cols, m)
    dh_in = dh
    if HAS_ZH:  # zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~_t
        dh = dh - _ld(ZH + row * H, cols, m) * dh
    # h = n + z (h_prev - n)
    d_npre = dh * (1.0 - updategate) * (1.0 - newgate * newgate)
    d_r = tl.where(m, d_npre * un * resetgate * (1.0 - resetgate), 0.0)
    d_z = tl.where(m, dh * (h_prev - newgate) * updategate * (1.0 - updategate), 0.0)
    d_un = tl.where(m, d_npre * resetgate, 0.0)
    d_npre = tl.where(m, d_npre, 0.0)
    # d hg: the LN over (r, z) jointly and the LN of U h
    w_r, w_z = d_r * g_r, d_z * g_z
    c1 = (tl.sum(w_r * xh_r, 0) + tl.sum(w_z * xh_z, 0)) / (2 * H)
    c2 = (tl.sum(w_r, 0) + tl.sum(w_z, 0)) / (2 * H)
    dg_r, dg_z = (w_r - xh_r * c1 - c2) * rs_h, (w_z - xh_z * c1 - c2) * rs_h
    w_n = d_un * g_u
    dg_n = _ln_backward1(w_n, xh_n, rs_u, H)
    if HAS_XLN:
        v_r, v_z = d_r * _ld(GX, cols, m), d_z * _ld(GX + H, cols, m)
        e1 = (tl.sum(v_r * xx_r, 0) + tl.sum(v_z * xx_z, 0)) / (2 * H)
        e2 = (tl.sum(v_r, 0) + tl.sum(v_z, 0)) / (2 * H)
        dx_r, dx_z = (v_r - xx_r * e1 - e2) * rs_x, (v_z - xx_z * e1 - e2) * rs_x
        v_n = d_npre * _ld(GX + 2 * H, cols, m)
        dx_n = _ln_backward1(v_n, xx_n, rs_xn, H)
    else:
        dx_r, dx_z, dx_n = d_r, d_z, d_npre
    dh_direct = dh * updategate
    if HAS_ZH:
        dh_direct += _ld(ZH + row * H, cols, m) * dh_in
    if HAS_LEN:
        dh_direct = tl.where(live, dh_direct, dh_in)
        d_r, d_z = tl.where(live, d_r, 0.0), tl.where(live, d_z, 0.0)
        d_un, d_npre = tl.where(live, d_un, 0.0), tl.where(live, d_npre, 0.0)
        dg_r, dg_z, dg_n = tl.where(live, dg_r, 0.0), tl.where(live, dg_z, 0.0), \
            tl.where(live, dg_n, 0.0)
        dx_r, dx_z, dx_n = tl.where(live, dx_r, 0.0), tl.where(live, dx_z, 0.0), \
            tl.where(live, dx_n, 0.0)
    tl.store(DH + b * H + cols, dh_direct, mask=m)
    ty = DHG.dtype.element_ty
    dhg = DHG + row * G
    tl.store(dhg + cols, dg_r.to(ty), mask=m)
    tl.store(dhg + H + cols, dg_z.to(ty), mask=m)
    tl.store(dhg + 2 * H + cols, dg_n.to(ty), mask=m)
    dxg = DXG + row * G
    tl.store(dxg + cols, dx_r.to(ty), mask=m)
    tl.store(dxg + H + cols, dx_z.to(ty), mask=m)
    tl.store(dxg + 2 * H + cols, dx_n.to(ty), mask=m)
    # [g_h 2H | b_h 2H | g_u H | b_u H | g_x 3H | b_x 3H]
    acc = ACC + b * (12 * H)
    _acc(acc, cols, m, d_r * xh_r)
    _acc(acc + H, cols, m, d_z * xh_z)
    _acc(acc + 2 * H, cols, m, d_r)
    _acc(acc + 3 * H, cols, m, d_z)
    _acc(acc + 4 * H, cols, m, d_un * xh_n)
    _acc(acc + 5 * H, cols, m, d_un)
    if HAS_XLN:
        _acc(acc + 6 * H, cols, m, d_r * xx_r)
        _acc(acc + 7 * H, cols, m, d_z * xx_z)
        _acc(acc + 8 * H, cols, m, d_npre * xx_n)
        _acc(acc + 9 * H, cols, m, d_r)
        _acc(acc + 10 * H, cols, m, d_z)
        _acc(acc + 11 * H, cols, m, d_npre)


def _gru_forward(xg, h0, w_hh, params, lens, eps, save: bool, masks=(None, None)):
    T, B, G = xg.shape
    H = G // 3
    gh, bh, gu, bu, gx, bx = params
    has_xln = gx is not None
    block, warps = _block(H)
    wt = w_hh.detach().t()
    hs = xg.new_empty(T + 1, B, H)
    hs[0] = h0
    hg_all = xg.new_empty(T if save else 1, B, G)
    stats = torch.empty(T if save else 1, B, 8, dtype=torch.float32, device=xg.device)
    out = xg.new_empty(T, B, H) if lens is not None else hs[1:]
    h_mask, zone_h = masks
    for t in range(T):
        slot = t if save else 0
        h_in = hs[t] if h_mask is None else hs[t] * h_mask          # recurrent dropout
        torch.mm(h_in, wt, out=hg_all[slot])                       # [W_h h; U h]  (B, 3H)
        _gru_forward_step[(B,)](
            hg_all, xg, hs, out, stats, lens if lens is not None else hs,
            gh, bh, gu, bu, gx if has_xln else gh, bx if has_xln else bh,
            hs if zone_h is None else zone_h, t, slot, B, H, eps,
            HAS_LEN=lens is not None, HAS_XLN=has_xln, SAVE=save, HAS_ZH=zone_h is not None,
            BLOCK_H=block, num_warps=warps, **LAUNCH)
    return out, hs[T].clone(), ((hg_all, hs, stats) if save else None)


class _GRUFunction(torch.autograd.Function):
    """Differentiable to any order, as ``_rnn_lstm._LSTMFunction``."""

    @staticmethod
    def forward(ctx, xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, lens, eps,
                h_mask=None, zone_h=None):
        inputs = (xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x)
        params = tuple(_c(p) for p in inputs[3:])
        ctx.masks, ctx.eps = (h_mask, zone_h), eps
        out, h_n, (hg_all, hs, stats) = _gru_forward(xg, h0, w_hh, params, lens, eps, True,
                                                     ctx.masks)
        ctx.save_for_backward(hg_all, hs, stats, *inputs)
        ctx.lens, ctx.dtypes = lens, [None if p is None else p.dtype for p in inputs[3:]]
        return out, h_n

    @staticmethod
    def backward(ctx, grad_out, grad_hn):
        hg_all, hs, stats, *inputs = ctx.saved_tensors
        if torch.is_grad_enabled():     # create_graph=True: a backward autograd can differentiate
            found = reference_grads("gru", tuple(inputs), ctx.lens, ctx.eps, ctx.masks,
                                    ctx.needs_input_grad[:9], (grad_out, grad_hn))
            return (*found, None, None, None, None)
        xg, w_hh = inputs[0], inputs[2]
        gh, bh, gu, bu, gx, bx = (_c(p) for p in inputs[3:])
        lens = ctx.lens
        T, B, G = xg.shape
        H = G // 3
        has_xln = gx is not None
        block, warps = _block(H)
        grad_out = grad_out.contiguous()
        dh = grad_hn.float().contiguous().clone()
        dhmm = xg.new_zeros(B, H)
        dhg = xg.new_empty(T, B, G)
        dxg = xg.new_empty(T, B, G)
        acc = torch.zeros(B, 12 * H, dtype=torch.float32, device=xg.device)
        w = w_hh.detach()
        h_mask, zone_h = ctx.masks
        for t in range(T - 1, -1, -1):
            _gru_backward_step[(B,)](
                hg_all, xg, hs, stats, lens if lens is not None else dh, grad_out, dh, dhmm,
                dhg, dxg, acc, gh, bh, gu, bu, gx if has_xln else gh, bx if has_xln else bh,
                dh if zone_h is None else zone_h,
                t, B, H, HAS_LEN=lens is not None, HAS_XLN=has_xln, HAS_DHMM=t < T - 1,
                HAS_ZH=zone_h is not None, BLOCK_H=block, num_warps=warps, **LAUNCH)
            torch.mm(dhg[t], w, out=dhmm)
            if h_mask is not None:                                 # the GEMM read h * h_mask
                dhmm.mul_(h_mask)
        dh0 = (dh + dhmm.float()).to(hs.dtype)
        h_in = hs[:T] if h_mask is None else hs[:T] * h_mask
        dw_hh = torch.mm(dhg.view(T * B, G).t(), h_in.reshape(T * B, H))
        g = acc.sum(0)
        # the accumulator's order: g_h, b_h, g_u, b_u, g_x, b_x
        dgh, dbh, dgu, dbu, dgx, dbx = g.split([2 * H, 2 * H, H, H, 3 * H, 3 * H])
        grads = [v.to(dt) if dt is not None else None for v, dt in
                 zip((dgh, dbh, dgu, dbu, dgx, dbx), ctx.dtypes)]
        return (dxg, dh0, dw_hh.to(w_hh.dtype), *grads, None, None, None, None)


def ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths=None,
                    eps: float = 1e-5, gain_x=None, bias_x=None, *, h_mask=None, zone_h=None):
    _check_pairs("ln_gru_sequence", gain_x, bias_x)
    T, B, _ = xg.shape
    lens = _lengths(lengths, T, B, xg.device)
    xg = xg.contiguous()
    masks = _masks(xg, h_mask, zone_h)
    tensors = (xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors):
        return _GRUFunction.apply(*tensors, lens, eps, *masks)
    with torch.no_grad():
        params = tuple(_c(p) for p in tensors[3:])
        return _gru_forward(xg, h0, w_hh, params, lens, eps, False, masks)[:2]
