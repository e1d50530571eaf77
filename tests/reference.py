"""Naive references written straight from the equations (docs/paper.md), shared by tests and
benchmarks.

Deliberately plain: explicit sums, no fused kernels, everything in float64. The tests check the
TorchScript LN-LSTM that ``layernorm bench rnn`` times (``layernorm_paper.bench.baseline``)
against ``ref_recurrent``.
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
    return _channel_affine(y, weight, bias)


def _channel_affine(y, weight, bias):
    """y * weight[c] + bias[c] for (N, C, *spatial)."""
    view = (1, -1) + (1,) * (y.dim() - 2)
    if weight is not None:
        y = y * weight.double().view(view)
    if bias is not None:
        y = y + bias.double().view(view)
    return y


def ref_conv_layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Each example of (N, C, *spatial) over all its C * prod(spatial) values; per-channel affine."""
    return _channel_affine(ref_layer_norm(x, x.dim() - 1, eps=eps), weight, bias)


# ---------------------------------------------------------------------------------------------
# Recurrent networks (paper section 3.1; docs/paper.md section 2), one example at a time, one step
# at a time.
# Parameters use the paper's names: per layer and direction a dict with W_x (G, I), W_h (G, H),
# b_x, b_h (G,) or None (the biases added after each term's normalization; torch's bias_ih,
# bias_hh), g_x, g_h (G,) gains (LSTM, GRU), g (H,) gain (RNN), g_c, b_c (H,) (LSTM's cell LN).
# norm is "layer" or "none". Gate order as torch: LSTM i, f, g(u), o; GRU r, z, n.
# ---------------------------------------------------------------------------------------------

def _ln(a, g, b, eps):
    """LN of one example's vector a, or a + b without normalization (g is None)."""
    if g is None:
        return a if b is None else a + b.double()
    return ref_layer_norm(a, 1, g, b, eps)


def _part(p, key, sl):
    return None if p.get(key) is None else p[key][sl]


def ref_lstm_step(x, h, c, p, eps=1e-5):
    """gates = LN(W_h h; g_h, b_h) + LN(W_x x; g_x, b_x); c = s(f) c + s(i) tanh(u);
    h = s(o) tanh(LN(c; g_c, b_c)); the raw c is carried."""
    gates = _ln(p["W_h"].double() @ h, p.get("g_h"), p.get("b_h"), eps) + \
        _ln(p["W_x"].double() @ x, p.get("g_x"), p.get("b_x"), eps)
    H = h.shape[0]
    i, f, u, o = (gates[k * H:(k + 1) * H] for k in range(4))
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
    cn = c if p.get("g_c") is None else ref_layer_norm(c, 1, p["g_c"], p.get("b_c"), eps)
    return torch.sigmoid(o) * torch.tanh(cn), c


def ref_gru_step(x, h, p, eps=1e-5):
    """z, r = s(LN(W_h h; g1, b1) + LN(W_x x; g2, b2)) over 2H jointly;
    n = tanh(LN(W x; g3, b3) + r * LN(U h; g4, b4)); h = (1 - z) n + z h (torch's z)."""
    H = h.shape[0]
    rz, nn_ = slice(0, 2 * H), slice(2 * H, 3 * H)
    Wx, Wh = p["W_x"].double(), p["W_h"].double()
    gates = torch.sigmoid(_ln(Wh[rz] @ h, _part(p, "g_h", rz), _part(p, "b_h", rz), eps) +
                          _ln(Wx[rz] @ x, _part(p, "g_x", rz), _part(p, "b_x", rz), eps))
    r, z = gates[:H], gates[H:]
    n = torch.tanh(_ln(Wx[nn_] @ x, _part(p, "g_x", nn_), _part(p, "b_x", nn_), eps) +
                   r * _ln(Wh[nn_] @ h, _part(p, "g_h", nn_), _part(p, "b_h", nn_), eps))
    return (1 - z) * n + z * h


def ref_rnn_step(x, h, p, nonlinearity="tanh", eps=1e-5):
    """Eq. 4: a = W_h h + W_x x; h = f(g / sigma (a - mu) + b), b = b_x + b_h."""
    a = p["W_h"].double() @ h + p["W_x"].double() @ x
    b = None if p.get("b_x") is None else p["b_x"].double() + p["b_h"].double()
    y = _ln(a, p.get("g"), b, eps)
    return torch.tanh(y) if nonlinearity == "tanh" else torch.relu(y)


def ref_recurrent(mode, seq, layers, h0=None, c0=None, nonlinearity="tanh", eps=1e-5):
    """Run ONE example's unpadded sequence seq (T, I) through a stack, step by step.

    layers[l][d]: parameter dict of layer l, direction d (d = 1 reads the sequence backwards).
    h0, c0: (L * D, H) initial states or None (zeros). Returns output (T, D * H) and the final
    h (L * D, H) (and c for LSTM), all float64.
    """
    x = seq.double()
    H = layers[0][0]["W_h"].shape[1]
    D = len(layers[0])
    hs, cs = [], []
    for l, directions in enumerate(layers):
        outs = []
        for d, p in enumerate(directions):
            k = l * D + d
            h = x.new_zeros(H) if h0 is None else h0[k].double()
            c = x.new_zeros(H) if c0 is None else c0[k].double()
            steps = range(x.shape[0] - 1, -1, -1) if d else range(x.shape[0])
            out = [None] * x.shape[0]
            for t in steps:
                if mode == "LSTM":
                    h, c = ref_lstm_step(x[t], h, c, p, eps)
                elif mode == "GRU":
                    h = ref_gru_step(x[t], h, p, eps)
                else:
                    h = ref_rnn_step(x[t], h, p, nonlinearity, eps)
                out[t] = h
            outs.append(torch.stack(out))
            hs.append(h)
            cs.append(c)
        x = torch.cat(outs, -1)
    return x, torch.stack(hs), (torch.stack(cs) if mode == "LSTM" else None)


def ref_bn_lstm(x, lengths, p, eps=1e-5):
    """BN-LSTM (Cooijmans et al. 2016) in training mode, one layer, one direction, a batch.

    x: (T, B, I) padded; lengths: list of B ints. At step t each term is normalized with the mean
    and biased variance over the examples still active (t < length), computed with explicit
    sums: gates = BN(W_h h; g_h) + b_h + BN(W_x x; g_x) + b_x; h = s(o) tanh(BN(c; g_c) + b_c).
    Past its length an example keeps its state and outputs 0. Returns out (T, B, H), h, c (B, H).
    """
    T, B = x.shape[:2]
    H = p["W_h"].shape[1]

    def bn(a, active, g, b):
        n = len(active)
        mu = sum(a[i] for i in active) / n
        var = sum((a[i] - mu) ** 2 for i in active) / n
        y = (a - mu) / torch.sqrt(var + eps) * g.double()
        return y if b is None else y + b.double()

    h, c = x.new_zeros(B, H, dtype=torch.float64), x.new_zeros(B, H, dtype=torch.float64)
    out = x.new_zeros(T, B, H, dtype=torch.float64)
    for t in range(T):
        active = [i for i in range(B) if t < lengths[i]]
        ax = x[t].double() @ p["W_x"].double().T
        ah = h @ p["W_h"].double().T
        gates = bn(ah, active, p["g_h"], p.get("b_h")) + bn(ax, active, p["g_x"], p.get("b_x"))
        i, f, u, o = gates.split(H, 1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
        h_new = torch.sigmoid(o) * torch.tanh(bn(c_new, active, p["g_c"], p.get("b_c")))
        keep = torch.tensor([t < lengths[i] for i in range(B)]).unsqueeze(1)
        h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        out[t] = torch.where(keep, h_new, torch.zeros_like(h_new))
    return out, h, c


# --- LN-LSTM / LN-GRU over a sequence (paper section 3.1; docs/paper.md section 2) ---------------
# A plain autograd step loop.

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
        a = torch.nn.functional.layer_norm(hg[:, :2 * H], (2 * H,), gain_h, bias_h, eps)
        r, z = torch.sigmoid(a + xg[t, :, :2 * H]).chunk(2, 1)
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


def assert_step_matches(ref, fast, inputs64, order: int, tol: dict, weights) -> None:
    """A float32 step ``fast`` against the float64 ``ref`` on the same inputs: values, every
    input's gradient under output weights ``weights(outputs)`` (second order: the gradient of
    sum(sin(first-order gradients))), and ``fast`` again without autograd."""
    a64 = [t.clone().requires_grad_() for t in inputs64]
    a32 = [t.float().requires_grad_() for t in inputs64]
    want, got = ref(*a64), fast(*a32)
    for u, v in zip(got, want):
        torch.testing.assert_close(u.double(), v, **tol)
    w = weights(want)
    g64 = torch.autograd.grad(want, a64, w, create_graph=order == 2)
    g32 = torch.autograd.grad(got, a32, [v.float() for v in w], create_graph=order == 2)
    if order == 2:
        g64 = torch.autograd.grad(sum(g.sin().sum() for g in g64), a64)
        g32 = torch.autograd.grad(sum(g.sin().sum() for g in g32), a32)
    for u, v in zip(g32, g64):
        torch.testing.assert_close(u.double(), v, **tol)
    with torch.no_grad():                                   # the step without autograd
        for u, v in zip(fast(*[t.detach() for t in a32]), want):
            torch.testing.assert_close(u.double(), v, **tol)
