"""One LN-LSTM / LN-GRU / LN-RNN step in as few torch ops as the equations allow: the path of the
cells (``layernorm.rnn.cells``) and of the stacked modules at T = 1 when ``norm="layer"``.

At batch 1 a step is a few small GEMMs and vectors of a few hundred units, so its time is the
per-op overhead (Python, dispatcher, autograd nodes), not arithmetic. The readable path (``Term``,
``steps.lstm_step``) spends it on generality (batch-norm statistics, group splits, checks per
term); here each step is the equations of docs/rnn.md written straight onto torch's fused
kernels: ``F.linear`` for each term, ``torch.layer_norm`` with the term's gain and bias (one
kernel, float32 statistics for half types; ``F.layer_norm`` without its Python wrapper, which
measured a quarter of the call at batch 1), one ``sigmoid`` over all gates, and the splits as
the C methods ``unsafe_chunk`` / ``unsafe_split_with_sizes`` (``Tensor.split`` is a Python
wrapper, twice the cost at batch 1; the pieces are read, never written in place, so the view
tracking the safe variants pay for is not needed). Plain
differentiable ops, so autograd of any order, torch.func, torch.compile and torch.jit.trace work
as on any torch code.

Gate order and conventions are torch's (``steps``): LSTM i, f, g, o; GRU r, z, n with
h_t = (1 - z) n + z h_{t-1}.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_ln = torch.layer_norm  # F.layer_norm's kernel


def ln_lstm_step(x: Tensor, h: Tensor, c: Tensor, w_ih: Tensor, w_hh: Tensor,
                 gain_ih: Tensor, bias_ih: Tensor | None, gain_hh: Tensor,
                 bias_hh: Tensor | None, gain_c: Tensor, bias_c: Tensor | None,
                 eps: float) -> tuple[Tensor, Tensor]:
    """x (B, I), h, c (B, H) -> (h_t, c_t)::

        gates = LN(W_x x) + LN(W_h h)          each with its gain and bias, over all 4H jointly
        c_t = sigmoid(f) c + sigmoid(i) tanh(g)
        h_t = sigmoid(o) tanh(LN(c_t))
    """
    return lstm_from_terms(F.linear(x, w_ih), F.linear(h, w_hh), c, gain_ih, bias_ih, gain_hh,
                           bias_hh, gain_c, bias_c, eps)


def lstm_from_terms(xw: Tensor, hg: Tensor, c: Tensor, gain_ih: Tensor, bias_ih: Tensor | None,
                    gain_hh: Tensor, bias_hh: Tensor | None, gain_c: Tensor,
                    bias_c: Tensor | None, eps: float) -> tuple[Tensor, Tensor]:
    """``ln_lstm_step`` from its two GEMMs, xw = W_x x and hg = W_h h (B, 4H) each: the step
    the C kernel computes after them (``_cell_native``), and its second derivatives."""
    G = xw.shape[-1]
    H = G // 4
    gates = _ln(xw, (G,), gain_ih, bias_ih, eps) + _ln(hg, (G,), gain_hh, bias_hh, eps)  # (B, 4H)
    ingate, forgetgate, _, outgate = torch.sigmoid(gates).unsafe_chunk(4, 1)
    c = torch.addcmul(forgetgate * c, ingate, torch.tanh(gates.narrow(1, 2 * H, H)))
    h = outgate * torch.tanh(_ln(c, (H,), gain_c, bias_c, eps))
    return h, c


def gru_affine_parts(gain_ih: Tensor, bias_ih: Tensor | None, gain_hh: Tensor,
                     bias_hh: Tensor | None) -> tuple:
    """Each term's gain and bias split into the (r, z) part and the candidate's part:
    (g_ih_rz, g_ih_n, b_ih_rz, b_ih_n, g_hh_rz, g_hh_n, b_hh_rz, b_hh_n), None for no bias."""
    H = gain_ih.shape[0] // 3
    sizes = [2 * H, H]
    parts = []
    for gain, bias in ((gain_ih, bias_ih), (gain_hh, bias_hh)):
        parts += gain.unsafe_split_with_sizes(sizes)
        parts += (None, None) if bias is None else bias.unsafe_split_with_sizes(sizes)
    return tuple(parts)


def ln_gru_step(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, gain_ih: Tensor,
                bias_ih: Tensor | None, gain_hh: Tensor, bias_hh: Tensor | None,
                eps: float) -> Tensor:
    """x (B, I), h (B, H) -> h_t::

        r, z = sigmoid(LN(W_x x)_rz + LN(W_h h)_rz)     LN over 2H jointly
        n    = tanh(LN(W x)_n + r * LN(U h)_n)           U h normalized before r multiplies it
        h_t  = n + z (h - n)
    """
    return ln_gru_step_parts(x, h, w_ih, w_hh,
                             gru_affine_parts(gain_ih, bias_ih, gain_hh, bias_hh), eps)


def ln_gru_step_parts(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, parts: tuple,
                      eps: float) -> Tensor:
    """``ln_gru_step`` with the gains and biases already split (``gru_affine_parts``): what a
    cell without autograd reuses from step to step while its parameters are unchanged."""
    return gru_from_terms(F.linear(x, w_ih), F.linear(h, w_hh), h, parts, eps)


def gru_from_terms(xw: Tensor, hg: Tensor, h: Tensor, parts: tuple, eps: float) -> Tensor:
    """``ln_gru_step_parts`` from its two GEMMs, xw = W_x x and hg = W_h h (B, 3H) each: the step
    the C kernel computes after them (``_cell_native``), and its second derivatives."""
    H = h.shape[-1]
    sizes = [2 * H, H]
    g_ih_rz, g_ih_n, b_ih_rz, b_ih_n, g_hh_rz, g_hh_n, b_hh_rz, b_hh_n = parts
    x_rz, x_n = xw.unsafe_split_with_sizes(sizes, 1)
    h_rz, h_n = hg.unsafe_split_with_sizes(sizes, 1)
    gates = (_ln(x_rz, (2 * H,), g_ih_rz, b_ih_rz, eps)            # LN over (r, z) jointly
             + _ln(h_rz, (2 * H,), g_hh_rz, b_hh_rz, eps))
    resetgate, updategate = torch.sigmoid(gates).unsafe_chunk(2, 1)
    newgate = torch.tanh(torch.addcmul(_ln(x_n, (H,), g_ih_n, b_ih_n, eps), resetgate,
                                       _ln(h_n, (H,), g_hh_n, b_hh_n, eps)))
    return torch.lerp(newgate, h, updategate)


def ln_rnn_step(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, gain: Tensor,
                bias: Tensor | None, eps: float, nonlinearity: str) -> Tensor:
    """x (B, I), h (B, H) -> h_t = f(LN(W_x x + W_h h) + b), eq. 4 (b = bias_ih + bias_hh)."""
    a = torch.addmm(F.linear(x, w_ih), h, w_hh.t())                             # (B, H)
    y = _ln(a, (h.shape[-1],), gain, bias, eps)
    return torch.tanh(y) if nonlinearity == "tanh" else torch.relu(y)
