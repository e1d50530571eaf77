"""The recurrent regularizers (recurrent dropout ``h_mask``, zoneout ``zone_h`` / ``zone_c``;
docs/rnn.md) in THE reference (``layernorm.recurrence``) and in every fast path of
``layernorm.ops``, each path against the reference."""
import pytest
import torch
import torch.nn.functional as F

from layernorm import recurrence
from layernorm.recurrence import lengths as L

TOL = {"atol": 1e-10, "rtol": 1e-9}


def _gen(seed):
    g = torch.Generator().manual_seed(seed)
    return lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731


def _masks(T, B, H, seed=5, p=0.4, z=0.3, dtype=torch.float64):
    """A recurrent dropout mask (B, H) with values 0 or 1/(1-p) and two Bernoulli(z) zoneout
    masks (T, B, H), as a module samples them."""
    g = torch.Generator().manual_seed(seed)
    h_mask = (torch.rand(B, H, generator=g) > p).to(dtype) / (1 - p)
    zone_h = (torch.rand(T, B, H, generator=g) < z).to(dtype)
    zone_c = (torch.rand(T, B, H, generator=g) < z).to(dtype)
    return h_mask, zone_h, zone_c


def _lstm_ref_step(w_hh, gain_h, bias_h, gain_c, bias_c, eps=1e-5):
    G = w_hh.shape[0]
    norm_hh = lambda a, t: F.layer_norm(a, (G,), gain_h, bias_h, eps)  # noqa: E731
    norm_c = lambda a, t: F.layer_norm(a, (G // 4,), gain_c, bias_c, eps)  # noqa: E731
    return lambda x, s, t, h_mask=None: recurrence.lstm_step(x, s[0], s[1], w_hh, norm_hh,
                                                             norm_c, t, h_mask=h_mask)


def _gru_ref_step(w_hh, gain_h, bias_h, gain_n, bias_n, eps=1e-5):
    H = w_hh.shape[1]

    def norm_hh(a, t):
        return torch.cat([F.layer_norm(a[:, :2 * H], (2 * H,), gain_h, bias_h, eps),
                          F.layer_norm(a[:, 2 * H:], (H,), gain_n, bias_n, eps)], -1)
    return lambda x, s, t, h_mask=None: recurrence.gru_step(x, s[0], w_hh, norm_hh, t,
                                                            h_mask=h_mask)


def _lstm_params(T, B, H, seed=0):
    r = _gen(seed)
    return (r(T, B, 4 * H), r(B, H), r(B, H), r(4 * H, H) * 0.5, 1 + 0.1 * r(4 * H), r(4 * H),
            1 + 0.1 * r(H), r(H))


def _gru_params(T, B, H, seed=1):
    r = _gen(seed)
    return (r(T, B, 3 * H), r(B, H), r(3 * H, H) * 0.5, 1 + 0.1 * r(2 * H), r(2 * H),
            1 + 0.1 * r(H), r(H))


# ---- THE reference ------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [None, [3, 3, 2, 1]])
def test_reference_lstm_gradcheck_with_masks(sizes):
    T, B, H = 3, 4, 2
    xg, h0, c0, w_hh, *norms = _lstm_params(T, B, H)
    h_mask, zone_h, zone_c = _masks(T, B, H)
    zone_h = zone_h * 0.5 + 0.25            # fractional values too (the expectation at eval)
    bs = None if sizes is None else torch.tensor(sizes)

    def f(xg, h0, c0, w_hh, *norms):
        out, (h, c) = recurrence.run_direction(_lstm_ref_step(w_hh, *norms), xg, (h0, c0),
                                               batch_sizes=bs, h_mask=h_mask,
                                               zone=(zone_h, zone_c))
        return out, h, c
    inputs = [t.requires_grad_() for t in (xg, h0, c0, w_hh, *norms)]
    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("sizes", [None, [3, 2, 2, 1]])
def test_reference_gru_gradcheck_with_masks(sizes):
    T, B, H = 3, 4, 2
    xg, h0, w_hh, *norms = _gru_params(T, B, H)
    h_mask, zone_h, _ = _masks(T, B, H)
    bs = None if sizes is None else torch.tensor(sizes)

    def f(xg, h0, w_hh, *norms):
        out, (h,) = recurrence.run_direction(_gru_ref_step(w_hh, *norms), xg, (h0,),
                                             batch_sizes=bs, h_mask=h_mask, zone=(zone_h,))
        return out, h
    inputs = [t.requires_grad_() for t in (xg, h0, w_hh, *norms)]
    assert torch.autograd.gradcheck(f, inputs)


def test_reference_neutral_masks_reproduce_the_unregularized_loop_exactly():
    """h_mask = ones and zone = zeros give bit-for-bit the result without them."""
    T, B, H = 4, 3, 3
    xg, h0, c0, w_hh, *norms = _lstm_params(T, B, H)
    step = _lstm_ref_step(w_hh, *norms)
    ones, zeros = torch.ones(B, H, dtype=xg.dtype), torch.zeros(T, B, H, dtype=xg.dtype)
    for bs in (None, torch.tensor([4, 3, 1, 1])):
        plain = recurrence.run_direction(step, xg, (h0, c0), batch_sizes=bs)
        reg = recurrence.run_direction(step, xg, (h0, c0), batch_sizes=bs, h_mask=ones,
                                       zone=(zeros, zeros))
        for a, b in zip((plain[0], *plain[1]), (reg[0], *reg[1])):
            assert torch.equal(a, b)
    gxg, gh0, gw, *gnorms = _gru_params(T, B, H)
    gstep = _gru_ref_step(gw, *gnorms)
    plain = recurrence.run_direction(gstep, gxg, (gh0,))
    reg = recurrence.run_direction(gstep, gxg, (gh0,), h_mask=ones, zone=(zeros,))
    assert torch.equal(plain[0], reg[0]) and torch.equal(plain[1][0], reg[1][0])
    # and the masks do change the result when they are not neutral
    h_mask, zone_h, zone_c = _masks(T, B, H)
    other = recurrence.run_direction(step, xg, (h0, c0), h_mask=h_mask, zone=(zone_h, zone_c))
    assert not torch.allclose(other[0], recurrence.run_direction(step, xg, (h0, c0))[0])


def test_reference_two_steps_by_hand():
    """A hand-written 2-step Elman recurrence: h~_t = tanh(x_t + W (h_{t-1} * m)), h_t = z_t
    h_{t-1} + (1 - z_t) h~_t, out[t] = h_t; and the readable steps read h * h_mask in the
    recurrent product only."""
    r = _gen(3)
    B, H = 2, 3
    x, h0, w = r(2, B, H), r(B, H), r(H, H)
    m = torch.tensor([[2.0, 0.0, 2.0], [0.0, 2.0, 2.0]], dtype=torch.float64)
    z = torch.tensor([[[1.0, 0.0, 0.5], [0.0, 0.0, 1.0]],
                      [[0.0, 1.0, 0.25], [1.0, 1.0, 0.0]]], dtype=torch.float64)
    step = lambda xt, s, t, h_mask=None: recurrence.rnn_step(  # noqa: E731
        xt, s[0], w, lambda a, t: a, torch.tanh, t, h_mask=h_mask)
    out, (h_n,) = recurrence.run_direction(step, x, (h0,), h_mask=m, zone=(z,))
    c1 = torch.tanh(x[0] + (h0 * m) @ w.t())
    h1 = z[0] * h0 + (1 - z[0]) * c1
    c2 = torch.tanh(x[1] + (h1 * m) @ w.t())
    h2 = z[1] * h1 + (1 - z[1]) * c2
    torch.testing.assert_close(out[0], h1, **TOL)
    torch.testing.assert_close(out[1], h2, **TOL)
    torch.testing.assert_close(h_n, h2, **TOL)
    assert torch.equal(out[0][0, 0], h0[0, 0]) and torch.equal(out[1][1, :2], h1[1, :2])
    # the GRU: the mask enters W_h h and U h, not z h_{t-1}
    gxg, gh0, gw, *gnorms = _gru_params(1, B, H)
    gstep = _gru_ref_step(gw, *gnorms)
    hg = F.linear(gh0 * m, gw)
    Hn = 2 * H
    hg = torch.cat([F.layer_norm(hg[:, :Hn], (Hn,), gnorms[0], gnorms[1], 1e-5),
                    F.layer_norm(hg[:, Hn:], (H,), gnorms[2], gnorms[3], 1e-5)], -1)
    rz = torch.sigmoid(gxg[0, :, :Hn] + hg[:, :Hn])
    n = torch.tanh(gxg[0, :, Hn:] + rz[:, :H] * hg[:, Hn:])
    want = n + rz[:, H:] * (gh0 - n)
    torch.testing.assert_close(gstep(gxg[0], (gh0,), 0, h_mask=m)[0], want, **TOL)
    # the LN steps on torch's kernels read the mask the same way
    w_ih = r(4 * H, H)
    xs, c0 = r(B, H), r(B, H)
    g = [1 + 0.1 * r(4 * H), r(4 * H), 1 + 0.1 * r(4 * H), r(4 * H), 1 + 0.1 * r(H), r(H)]
    a = recurrence.ln_lstm_step(xs, gh0, c0, w_ih, w_hh := r(4 * H, H), *g, 1e-5, h_mask=m)
    b = recurrence.ln_lstm_step(xs, gh0 * m, c0, w_ih, w_hh, *g, 1e-5)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, **TOL)


def test_reference_packed_rows_past_their_end_stay_frozen():
    """With batch_sizes (and with the mask encoding) each example's result is that of the example
    run alone over its own length with its own masks: out is 0 past the end and the final state
    is the zoned-out state at its last step."""
    T, B, H = 5, 4, 3
    xg, h0, c0, w_hh, *norms = _lstm_params(T, B, H, seed=7)
    h_mask, zone_h, zone_c = _masks(T, B, H, seed=8)
    step = _lstm_ref_step(w_hh, *norms)
    lens = [5, 4, 2, 0]
    _, bs = L.from_lengths(torch.tensor(lens), T, B)
    mask = (torch.arange(T).unsqueeze(1) < torch.tensor(lens)).unsqueeze(-1)
    for kw in ({"batch_sizes": bs}, {"mask": mask}):
        out, (h, c) = recurrence.run_direction(step, xg, (h0, c0), h_mask=h_mask,
                                               zone=(zone_h, zone_c), **kw)
        for b, n in enumerate(lens):
            sl = slice(b, b + 1)
            if n:
                o1, (h1, c1) = recurrence.run_direction(
                    step, xg[:n, sl], (h0[sl], c0[sl]), h_mask=h_mask[sl],
                    zone=(zone_h[:n, sl], zone_c[:n, sl]))
                torch.testing.assert_close(out[:n, sl], o1, **TOL)
            else:
                h1, c1 = h0[sl], c0[sl]
            assert torch.equal(out[n:, b], torch.zeros_like(out[n:, b]))
            torch.testing.assert_close(h[sl], h1, **TOL)
            torch.testing.assert_close(c[sl], c1, **TOL)
