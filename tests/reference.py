"""Naive references written straight from the equations (PAPER.md), shared by tests and benchmarks.

Deliberately plain: explicit sums, no fused kernels, everything in float64.
"""
from __future__ import annotations

import torch


def ref_layer_norm(x, k, weight=None, bias=None, eps=1e-5):
    """Normalize over the last k dims of each example: mu, sigma over its H = prod(shape) units."""
    x64 = x.double()
    lead = x64.shape[: x64.dim() - k]
    a = x64.reshape(*lead, -1)
    H = a.shape[-1]
    mu = a.sum(-1, keepdim=True) / H
    sigma = torch.sqrt(((a - mu) ** 2).sum(-1, keepdim=True) / H + eps)
    y = ((a - mu) / sigma).reshape(x64.shape)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def ref_rms_norm(x, k, weight=None, eps=1e-5):
    x64 = x.double()
    a = x64.reshape(*x64.shape[: x64.dim() - k], -1)
    rms = torch.sqrt((a ** 2).sum(-1, keepdim=True) / a.shape[-1] + eps)
    y = (a / rms).reshape(x64.shape)
    return y * weight.double() if weight is not None else y


def ref_batch_norm(x, weight=None, bias=None, eps=1e-5, unbiased=False):
    """Normalize each channel c of (N, C, *spatial) over all its N * prod(spatial) values."""
    x64 = x.double().transpose(0, 1)  # (C, N, *spatial)
    a = x64.reshape(x64.shape[0], -1)
    n = a.shape[1]
    mu = a.sum(1, keepdim=True) / n
    var = ((a - mu) ** 2).sum(1, keepdim=True) / (n - 1 if unbiased else n)
    y = ((a - mu) / torch.sqrt(var + eps)).reshape(x64.shape).transpose(0, 1)
    view = (1, -1) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.double().view(view)
    if bias is not None:
        y = y + bias.double().view(view)
    return y


def ref_conv_layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Each example of (N, C, *spatial) over all its C * prod(spatial) values; per-channel affine."""
    y = ref_layer_norm(x, x.dim() - 1, eps=eps)
    view = (1, -1) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.double().view(view)
    if bias is not None:
        y = y + bias.double().view(view)
    return y


# --- LN-LSTM / LN-GRU over a sequence (PAPER.md section 2): a plain autograd step loop -----------

def ref_ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, lengths=None,
                         eps=1e-5):
    """The contract of ``layernorm.rnn.fused.ln_lstm_sequence``, one readable step at a time::

        gates = LN(W_h h_{t-1}; gain_h, bias_h) + xg_t;  i, f, u, o = split(gates)
        c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u);   h_t = sigmoid(o) tanh(LN(c_t))

    Raw c_t carried; steps t >= lengths[b] copy the state and output 0. Runs in the inputs' dtype
    with ordinary autograd (so it also gives reference gradients)."""
    T, H = xg.shape[0], h0.shape[-1]
    h, c, outs = h0, c0, []
    for t in range(T):
        gates = torch.nn.functional.layer_norm(h @ w_hh.t(), (4 * H,), gain_h, bias_h, eps) + xg[t]
        i, f, u, o = gates.chunk(4, 1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
        h_new = torch.sigmoid(o) * torch.tanh(
            torch.nn.functional.layer_norm(c_new, (H,), gain_c, bias_c, eps))
        if lengths is not None:
            live = (lengths.to(xg.device) > t).unsqueeze(1)
            h_new, c_new = torch.where(live, h_new, h), torch.where(live, c_new, c)
            outs.append(torch.where(live, h_new, torch.zeros_like(h_new)))
        else:
            outs.append(h_new)
        h, c = h_new, c_new
    return torch.stack(outs), h, c


def ref_ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths=None, eps=1e-5):
    """The contract of ``layernorm.rnn.fused.ln_gru_sequence``, one readable step at a time::

        r, z = split(sigmoid(LN(W_h h_{t-1}; gain_h, bias_h) + xg_t[:2H]))
        h~   = tanh(xg_t[2H:] + r * LN(U h_{t-1}; gain_u, bias_u));  h_t = (1 - z) h~ + z h_{t-1}

    (torch.nn.GRU's convention for z; the paper's z is 1 - this z.)
    """
    T, H = xg.shape[0], h0.shape[-1]
    h, outs = h0, []
    for t in range(T):
        hg = h @ w_hh.t()
        r, z = torch.sigmoid(torch.nn.functional.layer_norm(hg[:, :2 * H], (2 * H,), gain_h,
                                                            bias_h, eps) + xg[t, :, :2 * H]).chunk(2, 1)
        un = torch.nn.functional.layer_norm(hg[:, 2 * H:], (H,), gain_u, bias_u, eps)
        n = torch.tanh(xg[t, :, 2 * H:] + r * un)
        h_new = (1 - z) * n + z * h
        if lengths is not None:
            live = (lengths.to(xg.device) > t).unsqueeze(1)
            h_new = torch.where(live, h_new, h)
            outs.append(torch.where(live, h_new, torch.zeros_like(h_new)))
        else:
            outs.append(h_new)
        h = h_new
    return torch.stack(outs), h
