"""One time step of an LSTM, GRU and Elman RNN (the paper's section 3.1; docs/rnn.md): THE step
equations of the package, pure torch functions.

Every layer computes at step t normalized *terms* (summed inputs) and then the gates of torch's
LSTM / GRU / Elman RNN (gate order and conventions torch's: LSTM i, f, g, o; GRU r, z, n with
h_t = (1 - z) n + z h_{t-1})::

    LSTM   gates = N(W_x x_t) + N(W_h h_{t-1})              N over all 4H gates jointly
           c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g)   the raw c_t is carried
           h_t = sigmoid(o) tanh(N(c_t))                   (W_hr h_t with a projection)
    GRU    r, z = sigmoid(N(W_x x_t)_rz + N(W_h h)_rz)     N over (r, z) jointly
           n    = tanh(N(W x_t)_n + r N(U h)_n)            U h normalized before r multiplies it
           h_t  = n + z (h_{t-1} - n)
    RNN    h_t  = f(N(W_x x_t + W_h h_{t-1}))              eq. 4: one N over the sum

Each cell's gates after its terms are written once (``lstm_gates``, ``gru_gates``). Two forms
feed them:

* the readable steps ``lstm_step``, ``gru_step``, ``rnn_step``: the normalization of each term
  is a callable ``norm(a, t)`` (``layernorm.rnn.terms.Term``: layer norm, per-step batch norm or
  the identity, each with its bias), the input term ``xg`` already computed;
* the layer-normalized steps ``ln_lstm_step``, ``ln_gru_step``, ``ln_rnn_step`` (and
  ``*_from_terms``, the same after the two GEMMs): the terms written straight onto torch's
  fused kernels, the path of the cells. At batch 1 a step is a few small GEMMs and vectors of a
  few hundred units, so its time is the per-op overhead (Python, dispatcher, autograd nodes),
  not arithmetic: ``F.linear`` for each term, ``torch.layer_norm`` with the term's gain and bias
  (one kernel, float32 statistics for half types; ``F.layer_norm`` without its Python wrapper,
  which measured a quarter of the call at batch 1), one ``sigmoid`` over all gates, and the
  splits as the C methods ``unsafe_chunk`` / ``split_with_sizes`` (``Tensor.split`` is a
  Python wrapper, twice the cost at batch 1; the pieces are read, never written in place, so the
  view tracking the safe variants pay for is not needed where a choice exists:
  ``unsafe_split_with_sizes`` has no batching rule, so the GRU's uneven split is the tracked one,
  which torch.func.vmap batches).

The recurrent dropout of Gal & Ghahramani (2016) enters every step as ``h_mask`` (B, H), None =
off: h_{t-1} * h_mask where h_{t-1} enters the recurrent product, nowhere else. Zoneout acts on
the new state after the step, in the loop (``run_direction``'s ``zone``).

Plain differentiable ops, so autograd of any order, torch.func, torch.compile and torch.jit.trace
work as on any torch code.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu}

StepFn = Callable[[Tensor, tuple, int], tuple]

_ln = torch.layer_norm  # F.layer_norm's kernel


# ---- the gates, once per cell ------------------------------------------------------------------

def lstm_gates(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """gates (B, 4H) = the summed normalized terms (i, f, g, o), c (B, H) = c_{t-1}
    -> (sigmoid(o), c_t) with c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g)."""
    H = c.shape[-1]
    ingate, forgetgate, _, outgate = torch.sigmoid(gates).unsafe_chunk(4, 1)
    c = torch.addcmul(forgetgate * c, ingate, torch.tanh(gates.narrow(1, 2 * H, H)))
    return outgate, c


def gru_gates(rz: Tensor, x_n: Tensor, h_n: Tensor, h: Tensor) -> Tensor:
    """rz (B, 2H) = the summed normalized (r, z) terms, x_n and h_n (B, H) the candidate's
    normalized input and recurrent terms, h (B, H) = h_{t-1} -> h_t = n + z (h_{t-1} - n),
    n = tanh(x_n + r h_n)."""
    resetgate, updategate = torch.sigmoid(rz).unsafe_chunk(2, 1)
    newgate = torch.tanh(torch.addcmul(x_n, resetgate, h_n))
    if newgate.dtype != h.dtype:      # autocast: the GEMM's dtype meets the state's; promote
        return newgate + updategate * (h - newgate)
    return torch.lerp(newgate, h, updategate)                           # one op


# ---- the readable steps: any normalization ------------------------------------------------------

def _masked(h: Tensor, h_mask: Tensor | None) -> Tensor:
    """h_{t-1} as the recurrent product reads it: times the recurrent dropout mask, if any."""
    return h if h_mask is None else h * h_mask


def lstm_step(xg: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, norm_hh: Callable,
              norm_c: Callable, t: int | None = None, w_hr: Tensor | None = None,
              h_mask: Tensor | None = None):
    """One (LN-/BN-)LSTM step. xg: (B, 4H) = N(W_x x_t) + b_ih; h: (B, P); c: (B, H);
    w_hh: (4H, P); w_hr: (P, H) projection (torch's proj_size) or None (then P = H).
    h_mask: (B, P) recurrent dropout mask or None: the recurrent term is W_h (h * h_mask).

    Returns (h_t, c_t); c_t is the raw cell, only its normalized copy enters h_t.
    """
    outgate, c = lstm_gates(xg + norm_hh(F.linear(_masked(h, h_mask), w_hh), t), c)  # (B, 4H)
    h = outgate * torch.tanh(norm_c(c, t))
    if w_hr is not None:
        h = F.linear(h, w_hr)                                           # (B, P)
    return h, c


def gru_step(xg: Tensor, h: Tensor, w_hh: Tensor, norm_hh: Callable, t: int | None = None,
             h_mask: Tensor | None = None):
    """One (LN-)GRU step. xg: (B, 3H) = [N(W_x x_t) + b over r, z | N(W x_t) + b_in]; h: (B, H).

    The recurrent term is [N(W_h h) + b over r, z | N(U h) + b_hn]: U h is normalized before the
    reset gate multiplies it (the LN-GRU of docs/rnn.md). h_mask: (B, H) recurrent dropout mask
    or None: the recurrent term reads h * h_mask, the convex combination z h the unmasked h.
    Returns (h_t,).
    """
    hg = norm_hh(F.linear(_masked(h, h_mask), w_hh), t)                 # (B, 3H)
    H2 = 2 * h.shape[-1]
    return (gru_gates(xg[:, :H2] + hg[:, :H2], xg[:, H2:], hg[:, H2:], h),)


def rnn_step(xw: Tensor, h: Tensor, w_hh: Tensor, norm_a: Callable,
             nonlinearity: Callable = torch.tanh, t: int | None = None,
             h_mask: Tensor | None = None):
    """One (LN-)RNN step, eq. 4: h_t = f(N(W_x x_t + W_h h_{t-1}) + b). xw: (B, H) = W_x x_t.
    h_mask: (B, H) recurrent dropout mask or None: W_h (h * h_mask)."""
    return (nonlinearity(norm_a(xw + F.linear(_masked(h, h_mask), w_hh), t)),)


# ---- the layer-normalized steps on torch's kernels ----------------------------------------------

def ln_lstm_step(x: Tensor, h: Tensor, c: Tensor, w_ih: Tensor, w_hh: Tensor,
                 gain_ih: Tensor, bias_ih: Tensor | None, gain_hh: Tensor,
                 bias_hh: Tensor | None, gain_c: Tensor, bias_c: Tensor | None,
                 eps: float, h_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """x (B, I), h, c (B, H) -> (h_t, c_t)::

        gates = LN(W_x x) + LN(W_h h)          each with its gain and bias, over all 4H jointly
        c_t = sigmoid(f) c + sigmoid(i) tanh(g)
        h_t = sigmoid(o) tanh(LN(c_t))

    h_mask: (B, H) recurrent dropout mask or None: W_h (h * h_mask).
    """
    return lstm_from_terms(F.linear(x, w_ih), F.linear(_masked(h, h_mask), w_hh), c, gain_ih, bias_ih, gain_hh,
                           bias_hh, gain_c, bias_c, eps)


def lstm_from_terms(xw: Tensor, hg: Tensor, c: Tensor, gain_ih: Tensor, bias_ih: Tensor | None,
                    gain_hh: Tensor, bias_hh: Tensor | None, gain_c: Tensor,
                    bias_c: Tensor | None, eps: float) -> tuple[Tensor, Tensor]:
    """``ln_lstm_step`` from its two GEMMs, xw = W_x x and hg = W_h h (B, 4H) each: the step
    the C kernel computes after them (``layernorm.ops.cell``), and its second
    derivatives."""
    G = xw.shape[-1]
    outgate, c = lstm_gates(_ln(xw, (G,), gain_ih, bias_ih, eps)
                            + _ln(hg, (G,), gain_hh, bias_hh, eps), c)
    h = outgate * torch.tanh(_ln(c, (G // 4,), gain_c, bias_c, eps))
    return h, c


def gru_affine_parts(gain_ih: Tensor, bias_ih: Tensor | None, gain_hh: Tensor,
                     bias_hh: Tensor | None) -> tuple:
    """Each term's gain and bias split into the (r, z) part and the candidate's part:
    (g_ih_rz, g_ih_n, b_ih_rz, b_ih_n, g_hh_rz, g_hh_n, b_hh_rz, b_hh_n), None for no bias."""
    H = gain_ih.shape[0] // 3
    sizes = [2 * H, H]
    parts = []
    for gain, bias in ((gain_ih, bias_ih), (gain_hh, bias_hh)):
        parts += gain.split_with_sizes(sizes)
        parts += (None, None) if bias is None else bias.split_with_sizes(sizes)
    return tuple(parts)


def ln_gru_step(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, gain_ih: Tensor,
                bias_ih: Tensor | None, gain_hh: Tensor, bias_hh: Tensor | None,
                eps: float, h_mask: Tensor | None = None) -> Tensor:
    """x (B, I), h (B, H) -> h_t::

        r, z = sigmoid(LN(W_x x)_rz + LN(W_h h)_rz)     LN over 2H jointly
        n    = tanh(LN(W x)_n + r * LN(U h)_n)           U h normalized before r multiplies it
        h_t  = n + z (h - n)

    h_mask: (B, H) recurrent dropout mask or None: W_h, U read h * h_mask; z h reads h.
    """
    return ln_gru_step_parts(x, h, w_ih, w_hh,
                             gru_affine_parts(gain_ih, bias_ih, gain_hh, bias_hh), eps, h_mask)


def ln_gru_step_parts(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, parts: tuple,
                      eps: float, h_mask: Tensor | None = None) -> Tensor:
    """``ln_gru_step`` with the gains and biases already split (``gru_affine_parts``): what a
    cell without autograd reuses from step to step while its parameters are unchanged."""
    return gru_from_terms(F.linear(x, w_ih), F.linear(_masked(h, h_mask), w_hh), h, parts, eps)


def gru_from_terms(xw: Tensor, hg: Tensor, h: Tensor, parts: tuple, eps: float) -> Tensor:
    """``ln_gru_step_parts`` from its two GEMMs, xw = W_x x and hg = W_h h (B, 3H) each: the step
    the C kernel computes after them (``layernorm.ops.cell``), and its second
    derivatives."""
    H = h.shape[-1]
    sizes = [2 * H, H]
    g_ih_rz, g_ih_n, b_ih_rz, b_ih_n, g_hh_rz, g_hh_n, b_hh_rz, b_hh_n = parts
    x_rz, x_n = xw.split_with_sizes(sizes, 1)
    h_rz, h_n = hg.split_with_sizes(sizes, 1)
    return gru_gates(_ln(x_rz, (2 * H,), g_ih_rz, b_ih_rz, eps)        # LN over (r, z) jointly
                     + _ln(h_rz, (2 * H,), g_hh_rz, b_hh_rz, eps),
                     _ln(x_n, (H,), g_ih_n, b_ih_n, eps), _ln(h_n, (H,), g_hh_n, b_hh_n, eps), h)


def ln_rnn_step(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, gain: Tensor,
                bias: Tensor | None, eps: float, nonlinearity: str,
                h_mask: Tensor | None = None) -> Tensor:
    """x (B, I), h (B, H) -> h_t = f(LN(W_x x + W_h h) + b), eq. 4 (b = bias_ih + bias_hh).
    h_mask: (B, H) recurrent dropout mask or None: W_h (h * h_mask)."""
    a = torch.addmm(F.linear(x, w_ih), _masked(h, h_mask), w_hh.t())           # (B, H)
    return NONLINEARITIES[nonlinearity](_ln(a, (h.shape[-1],), gain, bias, eps))
