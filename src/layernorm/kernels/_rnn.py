"""The LN-LSTM and LN-GRU recurrence on CUDA: per step one cuBLAS GEMM and ONE Triton kernel.

The equations (docs/rnn.md), arguments, gate order and results of
``layernorm.rnn.fused.ln_lstm_sequence`` / ``ln_gru_sequence``. Forward, step t::

    hg = h_{t-1} @ W_hh^T                                  torch.mm (cuBLAS)          (B, G)
    kernel: LN(hg) (+ LN of the raw input term when gain_x is given), gates, cell, LN(c),
            h_t; the state of an example past its length is copied forward, its output is 0

Backward, step t (from T - 1 down)::

    kernel: recomputes the step's activations from the saved hg, input term, cell states and
            statistics; d(gates), d(hg) through the LN, d(input term) (through the input LN),
            the state gradients, and adds the LN gain/bias gradients of its row to a float32
            (B, n_params) accumulator (each program owns its row: no atomics)
    dh_{t-1} += d(hg) @ W_hh                              torch.mm
    after the loop: dW_hh = ONE GEMM over all steps; LN parameter grads = accumulator.sum(0)

One program per example; the gate vectors are H-wide blocks of the next power of two, masked.
Activations and statistics in float32; h (the GEMM's input) in the input dtype, the LSTM's raw
cell state kept in float32 across steps.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ._norms import LAUNCH


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _ld(ptr, cols, m):
    return tl.load(ptr + cols, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _acc(ptr, cols, m, v):
    tl.store(ptr + cols, tl.load(ptr + cols, mask=m, other=0.0) + v, mask=m)


@triton.jit
def _center(a, m, H, eps):
    """One H-block's LN statistics -> (a - mean (0 where masked), mean, rstd); variance clamped at
    0, eps inside the sqrt."""
    mu = tl.sum(a, 0) / H
    d = tl.where(m, a - mu, 0.0)
    return d, mu, 1.0 / tl.sqrt(tl.maximum(tl.sum(d * d, 0) / H, 0.0) + eps)


@triton.jit
def _center2(a1, a2, m, H, eps):
    """As ``_center`` for an LN over two H-blocks jointly."""
    mu = (tl.sum(a1, 0) + tl.sum(a2, 0)) / (2 * H)
    d1, d2 = tl.where(m, a1 - mu, 0.0), tl.where(m, a2 - mu, 0.0)
    var = (tl.sum(d1 * d1, 0) + tl.sum(d2 * d2, 0)) / (2 * H)
    return d1, d2, mu, 1.0 / tl.sqrt(tl.maximum(var, 0.0) + eps)


@triton.jit
def _center4(a1, a2, a3, a4, m, H, eps):
    """As ``_center`` for an LN over four H-blocks jointly."""
    mu = (tl.sum(a1, 0) + tl.sum(a2, 0) + tl.sum(a3, 0) + tl.sum(a4, 0)) / (4 * H)
    d1, d2 = tl.where(m, a1 - mu, 0.0), tl.where(m, a2 - mu, 0.0)
    d3, d4 = tl.where(m, a3 - mu, 0.0), tl.where(m, a4 - mu, 0.0)
    var = (tl.sum(d1 * d1, 0) + tl.sum(d2 * d2, 0) + tl.sum(d3 * d3, 0)
           + tl.sum(d4 * d4, 0)) / (4 * H)
    return d1, d2, d3, d4, mu, 1.0 / tl.sqrt(tl.maximum(var, 0.0) + eps)


@triton.jit
def _xhat(x, mu, rs, m):
    """The normalized input recomputed from saved statistics (0 where masked)."""
    return tl.where(m, (x - mu) * rs, 0.0)


@triton.jit
def _ln_backward1(w, xhat, rs, H):
    """d(input) of an LN over one H-block, w = gain * dy: rs (w - xhat mean(w xhat) - mean(w))."""
    return (w - xhat * (tl.sum(w * xhat, 0) / H) - tl.sum(w, 0) / H) * rs


@triton.jit
def _dh_in(GOUT, DH, DHMM, LEN, t, b, cols, m, HAS_LEN: tl.constexpr, HAS_DHMM: tl.constexpr):
    """The gradient reaching h_t: from the output (0 past the example's length), from step t+1
    (direct, and through its GEMM when ``HAS_DHMM``)."""
    gout = _ld(GOUT, cols, m)
    if HAS_LEN:  # past its length the output is the constant 0
        gout = tl.where(t < tl.load(LEN + b), gout, 0.0)
    dh = _ld(DH, cols, m) + gout
    if HAS_DHMM:
        dh += _ld(DHMM, cols, m)
    return dh


# ---------------------------------------------------------------------------------------------
# LN-LSTM
# ---------------------------------------------------------------------------------------------

@triton.jit(do_not_specialize=["t", "hg_slot", "c_in", "c_out"])  # one compile for all steps
def _lstm_forward_step(HG, XW, HS, CS, OUT, STATS, LEN, GH, BH, GC, BC, GX, BX,
                       t, hg_slot, c_in, c_out, B, H, eps,
                       HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, SAVE: tl.constexpr,
                       BLOCK_H: tl.constexpr):
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
                        GH, BH, GC, BC, GX, BX, t, B, H,
                        HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, HAS_DHMM: tl.constexpr,
                        BLOCK_H: tl.constexpr):
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
    xh_c = _xhat(_ld(CS + (row + B) * H, cols, m), mu_c, rs_c, m)
    g_c = _ld(GC, cols, m)
    tc = _tanh(xh_c * g_c + _ld(BC, cols, m))
    # h = o tanh(LN(c)):  d LN(c) = dh o (1 - tc^2), then through the LN over H
    d_o = dh * tc * outgate * (1.0 - outgate)
    d_cn = dh * outgate * (1.0 - tc * tc)
    w_c = d_cn * g_c
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
    dh_direct = tl.zeros([BLOCK_H], dtype=tl.float32)
    dc_prev = dct * forgetgate
    if HAS_LEN:  # past its length: the state's gradient passes through, the step has none
        dh_direct = tl.where(live, dh_direct, dh)
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


# ---------------------------------------------------------------------------------------------
# LN-GRU
# ---------------------------------------------------------------------------------------------

@triton.jit(do_not_specialize=["t", "hg_slot"])  # one compile for all steps
def _gru_forward_step(HG, XW, HS, OUT, STATS, LEN, GH, BH, GU, BU, GX, BX,
                      t, hg_slot, B, H, eps,
                      HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, SAVE: tl.constexpr,
                      BLOCK_H: tl.constexpr):
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
                       GH, BH, GU, BU, GX, BX, t, B, H,
                       HAS_LEN: tl.constexpr, HAS_XLN: tl.constexpr, HAS_DHMM: tl.constexpr,
                       BLOCK_H: tl.constexpr):
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
    if HAS_LEN:
        dh_direct = tl.where(live, dh_direct, dh)
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


# ---------------------------------------------------------------------------------------------
# Python drivers
# ---------------------------------------------------------------------------------------------

def _block(H: int) -> tuple[int, int]:
    """(BLOCK_H, num_warps) for one example's H-wide gate blocks."""
    block = max(16, triton.next_power_of_2(H))
    return block, max(1, min(16, block // 64))


def _lengths(lengths, T: int, B: int, device) -> torch.Tensor | None:
    """(B,) int32 lengths on the device, or None when every example runs all T steps."""
    if lengths is None:
        return None
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.shape[0] != B or lengths.dtype.is_floating_point:
        raise ValueError(f"lengths must be an integer tensor of shape ({B},) (one true length per "
                         f"example), received {lengths.dtype} of shape {tuple(lengths.shape)}. "
                         f"Pass e.g. torch.tensor([len(s) for s in batch]).")
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo < 0 or hi > T:
        raise ValueError(f"lengths must lie in [0, T={T}], received min {lo}, max {hi}. Clip "
                         f"them to the padded length T.")
    if lo == T:
        return None
    return lengths.to(device=device, dtype=torch.int32)


def _check_pairs(who: str, gain_x, bias_x):
    if (gain_x is None) != (bias_x is None):
        raise ValueError(f"{who} expected gain_x and bias_x together (the input LN's gain and "
                         f"bias) or neither, received only one. Pass both, or None.")


def _c(x):
    return None if x is None else x.detach().contiguous()


def _lstm_forward(xg, h0, c0, w_hh, params, lens, eps, save: bool):
    """-> out, h_n, c_n, saved (hg_all, hs, cs, stats) or None."""
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
    for t in range(T):
        slot = t if save else 0
        torch.mm(hs[t], wt, out=hg_all[slot])                      # W_h h_{t-1}   (B, 4H)
        c_in, c_out = (t, t + 1) if save else (t % 2, (t + 1) % 2)  # cs: (T+1) or 2 slots
        _lstm_forward_step[(B,)](
            hg_all, xg, hs, cs, out, stats, lens if lens is not None else hs,
            gh, bh, gc, bc, gx if has_xln else gh, bx if has_xln else bh,
            t, slot, c_in, c_out, B, H, eps,
            HAS_LEN=lens is not None, HAS_XLN=has_xln, SAVE=save, BLOCK_H=block,
            num_warps=warps, **LAUNCH)
    h_n = hs[T].clone()
    c_n = cs[T if save else T % 2].to(xg.dtype, copy=True)
    return out, h_n, c_n, ((hg_all, hs, cs, stats) if save else None)


class _LSTMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, lens,
                eps):
        params = tuple(_c(p) for p in (gain_h, bias_h, gain_c, bias_c, gain_x, bias_x))
        out, h_n, c_n, (hg_all, hs, cs, stats) = _lstm_forward(xg, h0, c0, w_hh, params, lens,
                                                               eps, save=True)
        ctx.save_for_backward(xg, w_hh, hg_all, hs, cs, stats, *params)
        ctx.lens, ctx.dtypes = lens, [None if p is None else p.dtype for p in
                                      (gain_h, bias_h, gain_c, bias_c, gain_x, bias_x)]
        return out, h_n, c_n

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_hn, grad_cn):
        xg, w_hh, hg_all, hs, cs, stats, gh, bh, gc, bc, gx, bx = ctx.saved_tensors
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
        for t in range(T - 1, -1, -1):
            _lstm_backward_step[(B,)](
                hg_all, xg, cs, stats, lens if lens is not None else dh, grad_out, dh, dhmm, dc,
                dhg, dxg, acc, gh, bh, gc, bc, gx if has_xln else gh, bx if has_xln else bh,
                t, B, H, HAS_LEN=lens is not None, HAS_XLN=has_xln, HAS_DHMM=t < T - 1,
                BLOCK_H=block, num_warps=warps, **LAUNCH)
            torch.mm(dhg[t], w, out=dhmm)                          # through W_h h_{t-1}
        dh0 = (dh + dhmm.float()).to(hs.dtype)
        dw_hh = torch.mm(dhg.view(T * B, G).t(), hs[:T].reshape(T * B, H))
        g = acc.sum(0)
        dgh, dbh, dgc, dbc, dgx, dbx = g.split([G, G, H, H, G, G])
        grads = [v.to(dt) if dt is not None else None for v, dt in
                 zip((dgh, dbh, dgc, dbc, dgx, dbx), ctx.dtypes)]
        return (dxg, dh0, dc.to(hs.dtype), dw_hh.to(w_hh.dtype), *grads, None, None)


def ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, lengths=None,
                     eps: float = 1e-5, gain_x=None, bias_x=None):
    _check_pairs("ln_lstm_sequence", gain_x, bias_x)
    T, B, _ = xg.shape
    lens = _lengths(lengths, T, B, xg.device)
    xg = xg.contiguous()
    tensors = (xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors):
        return _LSTMFunction.apply(*tensors, lens, eps)
    with torch.no_grad():
        params = tuple(_c(p) for p in tensors[4:])
        return _lstm_forward(xg, h0, c0, w_hh, params, lens, eps, save=False)[:3]


def _gru_forward(xg, h0, w_hh, params, lens, eps, save: bool):
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
    for t in range(T):
        slot = t if save else 0
        torch.mm(hs[t], wt, out=hg_all[slot])                      # [W_h h; U h]  (B, 3H)
        _gru_forward_step[(B,)](
            hg_all, xg, hs, out, stats, lens if lens is not None else hs,
            gh, bh, gu, bu, gx if has_xln else gh, bx if has_xln else bh,
            t, slot, B, H, eps,
            HAS_LEN=lens is not None, HAS_XLN=has_xln, SAVE=save, BLOCK_H=block,
            num_warps=warps, **LAUNCH)
    return out, hs[T].clone(), ((hg_all, hs, stats) if save else None)


class _GRUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, lens, eps):
        params = tuple(_c(p) for p in (gain_h, bias_h, gain_u, bias_u, gain_x, bias_x))
        out, h_n, (hg_all, hs, stats) = _gru_forward(xg, h0, w_hh, params, lens, eps, save=True)
        ctx.save_for_backward(xg, w_hh, hg_all, hs, stats, *params)
        ctx.lens, ctx.dtypes = lens, [None if p is None else p.dtype for p in
                                      (gain_h, bias_h, gain_u, bias_u, gain_x, bias_x)]
        return out, h_n

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_hn):
        xg, w_hh, hg_all, hs, stats, gh, bh, gu, bu, gx, bx = ctx.saved_tensors
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
        for t in range(T - 1, -1, -1):
            _gru_backward_step[(B,)](
                hg_all, xg, hs, stats, lens if lens is not None else dh, grad_out, dh, dhmm,
                dhg, dxg, acc, gh, bh, gu, bu, gx if has_xln else gh, bx if has_xln else bh,
                t, B, H, HAS_LEN=lens is not None, HAS_XLN=has_xln, HAS_DHMM=t < T - 1,
                BLOCK_H=block, num_warps=warps, **LAUNCH)
            torch.mm(dhg[t], w, out=dhmm)
        dh0 = (dh + dhmm.float()).to(hs.dtype)
        dw_hh = torch.mm(dhg.view(T * B, G).t(), hs[:T].reshape(T * B, H))
        g = acc.sum(0)
        # the accumulator's order: g_h, b_h, g_u, b_u, g_x, b_x
        dgh, dbh, dgu, dbu, dgx, dbx = g.split([2 * H, 2 * H, H, H, 3 * H, 3 * H])
        grads = [v.to(dt) if dt is not None else None for v, dt in
                 zip((dgh, dbh, dgu, dbu, dgx, dbx), ctx.dtypes)]
        return (dxg, dh0, dw_hh.to(w_hh.dtype), *grads, None, None)


def ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths=None,
                    eps: float = 1e-5, gain_x=None, bias_x=None):
    _check_pairs("ln_gru_sequence", gain_x, bias_x)
    T, B, _ = xg.shape
    lens = _lengths(lengths, T, B, xg.device)
    xg = xg.contiguous()
    tensors = (xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors):
        return _GRUFunction.apply(*tensors, lens, eps)
    with torch.no_grad():
        params = tuple(_c(p) for p in tensors[3:])
        return _gru_forward(xg, h0, w_hh, params, lens, eps, save=False)[:2]
