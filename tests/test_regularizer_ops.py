"""The recurrent regularizers (recurrent dropout ``h_mask``, zoneout ``zone_h`` / ``zone_c``;
docs/rnn.md) in THE reference (``layernorm.recurrence``) and in every fast path of
``layernorm.ops``, each path against the reference."""
import importlib.util
import os
import sys

import pytest
import torch
import torch.nn.functional as F

HAVE_TRITON = importlib.util.find_spec("triton") is not None
ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
if HAVE_TRITON and not ON_GPU and "triton" not in sys.modules:
    # as tests/test_triton.py: the Triton kernels run interpreted over CPU tensors without a GPU,
    # which triton reads when it is first imported (so at collection, for the session)
    os.environ["TRITON_INTERPRET"] = "1"

from layernorm import recurrence  # noqa: E402
from layernorm.recurrence import lengths as L  # noqa: E402

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

@pytest.mark.parametrize("sizes", [None, [3, 2, 1]])
def test_reference_lstm_gradcheck_with_masks(sizes):
    T, B, H = 3, 3, 2
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
    assert torch.autograd.gradcheck(f, inputs, fast_mode=True)


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
    assert torch.autograd.gradcheck(f, inputs, fast_mode=True)


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


# ---- the fused operators ops.ln_lstm / ops.ln_gru against the reference ----------------------

from layernorm import ops  # noqa: E402
from tests.reference import assert_step_matches  # noqa: E402
from layernorm.ops import native  # noqa: E402

EPS = 1e-5
REGS = {"h_mask": ("h_mask",), "zoneout": ("zone_h", "zone_c"), "both": ("h_mask", "zone_h",
                                                                          "zone_c")}


@pytest.fixture(params=["native", "torch-ops"])
def path(request, monkeypatch):
    """The C kernels (float32; skipped without a compiler) or the torch-ops loops (float64)."""
    if request.param == "native":
        if native.load() is None:
            pytest.skip("no C compiler: the C kernels are unavailable")
    else:
        monkeypatch.setattr(native, "USE_NATIVE", False)
    return request.param


def _reg_masks(cell, T, B, H, which, seed=11):
    h_mask, zone_h, zone_c = _masks(T, B, H, seed=seed)
    zone_h = zone_h * 0.75 + 0.1 * (zone_h == 0)     # fractional values (the eval expectation)
    found = {"h_mask": h_mask, "zone_h": zone_h, "zone_c": zone_c}
    if cell == "gru":
        found.pop("zone_c")
    return {k: v for k, v in found.items() if k in which}


def _ref_lstm(xg, h0, c0, w_hh, gh, bh, gc, bc, gx=None, bx=None, batch_sizes=None,
              h_mask=None, zone_h=None, zone_c=None):
    if gx is not None:
        xg = F.layer_norm(xg, (xg.shape[-1],), gx, bx, EPS)
    zone = None if zone_h is None and zone_c is None else (zone_h, zone_c)
    out, (h, c) = recurrence.run_direction(_lstm_ref_step(w_hh, gh, bh, gc, bc, EPS), xg,
                                           (h0, c0), batch_sizes=batch_sizes, h_mask=h_mask,
                                           zone=zone)
    return out, h, c


def _ref_gru(xg, h0, w_hh, gh, bh, gu, bu, gx=None, bx=None, batch_sizes=None, h_mask=None,
             zone_h=None):
    if gx is not None:
        H = h0.shape[-1]
        xg = torch.cat([F.layer_norm(xg[..., :2 * H], (2 * H,), gx[:2 * H], bx[:2 * H], EPS),
                        F.layer_norm(xg[..., 2 * H:], (H,), gx[2 * H:], bx[2 * H:], EPS)], -1)
    out, (h,) = recurrence.run_direction(_gru_ref_step(w_hh, gh, bh, gu, bu, EPS), xg, (h0,),
                                         batch_sizes=batch_sizes, h_mask=h_mask,
                                         zone=None if zone_h is None else (zone_h,))
    return out, h


def _op_args(cell, T, B, H, input_ln, seed=2):
    args = list(_lstm_params(T, B, H, seed) if cell == "lstm" else _gru_params(T, B, H, seed))
    if input_ln:
        r = _gen(seed + 100)
        G = args[0].shape[-1]
        args += [1 + 0.1 * r(G), r(G)]
    return args


def _run_op(cell, args, masks, batch_sizes=None, lengths=None):
    n = 8 if cell == "lstm" else 7
    main, extra = args[:n], args[n:]
    kw = dict(eps=EPS, batch_sizes=batch_sizes, **masks)
    if extra:
        kw.update(gain_x=extra[0], bias_x=extra[1])
    if cell == "lstm":
        return ops.ln_lstm(*main, lengths, **kw)
    return ops.ln_gru(*main, lengths, **kw)


def _run_ref(cell, args, masks, batch_sizes=None):
    fn = _ref_lstm if cell == "lstm" else _ref_gru
    return fn(*args, batch_sizes=batch_sizes, **masks)


def _compare(cell, path, T, B, H, which, sizes=None, input_ln=False, flip=False):
    dtype = torch.float32 if path == "native" else torch.float64
    tol = {"atol": 2e-4, "rtol": 2e-4} if path == "native" else TOL
    args64 = _op_args(cell, T, B, H, input_ln)
    masks64 = _reg_masks(cell, T, B, H, which)
    if flip:  # the reverse direction: the same operator on the time-reversed input and zoneout
        args64[0] = args64[0].flip(0)
        masks64 = {k: (v.flip(0) if k.startswith("zone") else v) for k, v in masks64.items()}
    bs = None if sizes is None else torch.tensor(sizes)
    args = [a.to(dtype).requires_grad_() for a in args64]
    masks = {k: v.to(dtype) for k, v in masks64.items()}
    ref_args = [a.clone().requires_grad_() for a in args64]
    got = _run_op(cell, args, masks, batch_sizes=bs)
    want = _run_ref(cell, ref_args, masks64, batch_sizes=bs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, **tol)
    r = _gen(99)
    w = [r(*o.shape) for o in want]
    g_got = torch.autograd.grad([o.double() for o in got], args, w)
    g_want = torch.autograd.grad(want, ref_args, w)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a.double(), b, **tol)
    return got, want


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("which", list(REGS))
@pytest.mark.parametrize("sizes", [None, [8, 8, 6, 5, 3]])
def test_operator_with_regularizers_matches_reference(cell, which, sizes, path):
    """ops.ln_lstm / ops.ln_gru with each regularizer alone and together, packed and not: out,
    the final states and every gradient (xw, h0, c0, w_hh, gains, biases) as the reference."""
    _compare(cell, path, 5, 8, 8, REGS[which], sizes)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_operator_neutral_masks_give_the_unregularized_result(cell, path):
    """h_mask = ones and zone = zeros through the regularized branches of a path: the results and
    gradients of the call without masks (the masks do enter: other masks change them)."""
    T, B, H = 4, 6, 8
    dtype = torch.float32 if path == "native" else torch.float64
    args = [a.to(dtype) for a in _op_args(cell, T, B, H, True)]
    ones, zeros = torch.ones(B, H, dtype=dtype), torch.zeros(T, B, H, dtype=dtype)
    neutral = {"h_mask": ones, "zone_h": zeros}
    if cell == "lstm":
        neutral["zone_c"] = zeros
    bs = torch.tensor([6, 5, 5, 2])
    results = []
    for masks in ({}, neutral, _reg_masks(cell, T, B, H, REGS["both"])):
        leaves = [a.clone().requires_grad_() for a in args]
        outs = _run_op(cell, leaves, {k: v.to(dtype) for k, v in masks.items()}, batch_sizes=bs)
        grads = torch.autograd.grad([o.sum() for o in outs], leaves)
        results.append((*outs, *grads))
    tol = {"atol": 1e-6, "rtol": 1e-6} if path == "native" else {"atol": 0, "rtol": 0}
    for a, b in zip(results[0], results[1]):
        torch.testing.assert_close(a, b, **tol)
    assert not torch.allclose(results[0][0], results[2][0])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_operator_with_regularizers_input_ln_and_reversed(cell, path):
    """The same with the input LN inside the operator, and on time-reversed inputs (the reverse
    direction of a bidirectional layer)."""
    _compare(cell, path, 4, 8, 16, REGS["both"], [8, 7, 5, 2], input_ln=True)
    _compare(cell, path, 4, 6, 8, REGS["both"], None, flip=True)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_operator_masks_follow_unsorted_lengths_and_get_no_gradient(cell, path):
    """With per-example lengths in any order each mask row stays with its example; a mask that
    requires grad gets none (the masks are sampled, not learned)."""
    T, B, H = 5, 6, 8
    dtype = torch.float32 if path == "native" else torch.float64
    tol = {"atol": 2e-4, "rtol": 2e-4} if path == "native" else TOL
    args64 = _op_args(cell, T, B, H, False)
    masks64 = _reg_masks(cell, T, B, H, REGS["both"])
    lengths = torch.tensor([3, 5, 0, 2, 5, 4])
    args = [a.to(dtype) for a in args64]
    masks = {k: v.to(dtype).requires_grad_() for k, v in masks64.items()}
    got = _run_op(cell, args, masks, lengths=lengths)
    n_state = len(got) - 1
    for b, n in enumerate(lengths.tolist()):
        sl = slice(b, b + 1)
        one = [a[:, sl] if i == 0 else (a[sl] if i <= n_state else a) for i, a in
               enumerate(args64)]
        if n == 0:
            torch.testing.assert_close(got[1][sl].double(), args64[1][sl], **tol)
            continue
        one[0] = one[0][:n]
        m1 = {k: (v[sl] if k == "h_mask" else v[:n, sl]) for k, v in masks64.items()}
        want = _run_ref(cell, one, m1)
        torch.testing.assert_close(got[0][:n, sl].double(), want[0], **tol)
        for a, w in zip(got[1:], want[1:]):
            torch.testing.assert_close(a[sl].double(), w, **tol)
    assert all(got[0][n:, b].abs().max() == 0 for b, n in enumerate(lengths.tolist()) if n < T)
    leaf = args[0].requires_grad_()
    got = _run_op(cell, [leaf, *args[1:]], masks, lengths=lengths)
    found = torch.autograd.grad(got[0].sum(), [leaf, *masks.values()], allow_unused=True)
    assert found[0] is not None and all(g is None for g in found[1:])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_operator_second_order_and_torch_func_carry_the_masks(cell, path):
    """create_graph=True (the backward re-runs the differentiable loop) and torch.func.grad (the
    loop itself) see the same masks: both as the reference."""
    T, B, H = 4, 5, 6
    dtype = torch.float32 if path == "native" else torch.float64
    tol = {"atol": 5e-4, "rtol": 5e-4} if path == "native" else TOL
    args64 = _op_args(cell, T, B, H, False)
    masks64 = _reg_masks(cell, T, B, H, REGS["both"])
    bs = torch.tensor([5, 5, 3, 1])
    args = [a.to(dtype).requires_grad_() for a in args64]
    masks = {k: v.to(dtype) for k, v in masks64.items()}
    ref_args = [a.clone().requires_grad_() for a in args64]
    w_idx = 3 if cell == "lstm" else 2                                   # w_hh

    def double_grad(run, inputs, m):
        outs = run(cell, inputs, m, batch_sizes=bs)
        g = torch.autograd.grad(outs[0].double().square().sum() + outs[1].double().sum(),
                                inputs[:w_idx + 1], create_graph=True)
        return torch.autograd.grad(sum(x.double().sin().sum() for x in g), inputs[w_idx])[0]
    torch.testing.assert_close(double_grad(_run_op, args, masks).double(),
                               double_grad(_run_ref, ref_args, masks64), **tol)

    def loss(xg, run, inputs, m):
        outs = run(cell, [xg, *inputs[1:]], m, batch_sizes=bs)
        return outs[0].double().square().sum()
    got = torch.func.grad(loss)(args[0].detach(), _run_op, [a.detach() for a in args], masks)
    want = torch.func.grad(loss)(args64[0], _run_ref, args64, masks64)
    torch.testing.assert_close(got.double(), want, **tol)


# ---- the fused BN-LSTM / BN-GRU (ops.bn_direction) against the reference loop ---------------

def _bn_pair(mode, I, H, seed=0):
    """A float32 BN-LSTM / BN-GRU with random gains and biases, and its float64 copy."""
    import copy
    import layernorm
    torch.manual_seed(seed)
    m = getattr(layernorm, mode)(I, H, norm="batch")
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.uniform_(-1, 1)
    return m, copy.deepcopy(m).double()


def _bn_reference(ref, x, state, batch_sizes, masks):
    """THE loop over the readable step with the module's batch-norm terms (per-step statistics of
    the active rows), the regularizers given to ``run_direction``."""
    terms = ref._terms("_l0", batch_sizes)
    xg = ref._input_term(x, "_l0", terms)
    w_hh = ref._get("weight_hh", "_l0")
    if ref.mode == "LSTM":
        def step(xg_t, s, t, h_mask=None):
            return recurrence.lstm_step(xg_t, s[0], s[1], w_hh, terms["hh"], terms["c"], t,
                                        h_mask=h_mask)
        zone = (masks.get("zone_h"), masks.get("zone_c"))
    else:
        def step(xg_t, s, t, h_mask=None):
            return recurrence.gru_step(xg_t, s[0], w_hh, terms["hh"], t, h_mask=h_mask)
        zone = (masks.get("zone_h"),)
    zone = None if all(z is None for z in zone) else zone
    return recurrence.run_direction(step, xg, state, batch_sizes=batch_sizes,
                                    h_mask=masks.get("h_mask"), zone=zone)


@pytest.mark.skipif(native.load() is None,
                    reason="no C compiler: the fused BN-LSTM / BN-GRU does not apply")
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("which", list(REGS))
@pytest.mark.parametrize("sizes", [None, [6, 6, 5, 3], [6, 4, 1, 1]])
@pytest.mark.parametrize("training", [True, False])
def test_bn_direction_with_regularizers_matches_reference(mode, which, sizes, training):
    """ops.bn_direction with each regularizer alone and together, packed and not, in training
    (batch statistics) and eval (running statistics): out, final states, every gradient and the
    running statistics as the reference loop in float64. [6, 4, 1, 1] in training: the steps of
    one example run in a second kernel call, with their rows of the masks."""
    T, B, I, H = 4, 6, 5, 8
    m, ref = _bn_pair(mode, I, H)
    m.train(training)
    ref.train(training)
    n_states = 2 if mode == "LSTM" else 1
    r = _gen(21)
    x64, state64 = r(T, B, I), tuple(r(B, H) for _ in range(n_states))
    masks64 = _reg_masks(mode.lower(), T, B, H, REGS[which])
    masks = {k: v.float() for k, v in masks64.items()}
    x, state = x64.float().requires_grad_(), tuple(s.float().requires_grad_() for s in state64)
    x64.requires_grad_()
    state64 = tuple(s.requires_grad_() for s in state64)
    bs = None if sizes is None else sizes
    done = m._bn_direction("_l0", x, state, bs, masks)   # ops.bn_direction, m's tensors
    assert done is not None                              # the C kernels ran it
    out, final = done
    want, want_final = _bn_reference(ref, x64, state64, bs, masks64)
    tol = {"atol": 2e-4, "rtol": 2e-3}
    for a, b in zip((out, *final), (want, *want_final)):
        torch.testing.assert_close(a.double(), b, **tol)
    w = [r(*o.shape) for o in (want, *want_final)]
    leaves = [x, *state, *m.parameters()]
    leaves64 = [x64, *state64, *ref.parameters()]
    got = torch.autograd.grad([o.double() for o in (out, *final)], leaves, w)
    exp = torch.autograd.grad((want, *want_final), leaves64, w)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a.double(), b, **tol)
    for (name, a), b in zip(m.named_buffers(), ref.buffers()):
        torch.testing.assert_close(a.double(), b.double(), **tol, msg=name)


# ---- the cells' one step in C (ops.ln_lstm_step / ops.ln_gru_step) ---------------------------

@pytest.mark.skipif(native.load() is None,
                    reason="no C compiler: the C step does not apply")
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("which", list(REGS))
@pytest.mark.parametrize("order", [1, 2])
def test_cell_step_with_regularizers_matches_reference(cell, which, order):
    """One step with (B, H) masks: h_1 (and c_1) and the gradients of every input (first order
    through the C backward, second order through the differentiated reference step) as
    ``recurrence.ln_*_step`` with the mask followed by the zoneout s_1 = z s_0 + (1 - z) s~_1."""
    B, I, H = 9, 5, 8          # B = 9: the C step splits the rows over threads when it can
    G = (4 if cell == "lstm" else 3) * H
    r = _gen(31)
    x, h, c = r(B, I), r(B, H), r(B, H)
    w_ih, w_hh = r(G, I) * 0.5, r(G, H) * 0.5
    aff = [1 + 0.1 * r(G), r(G), 1 + 0.1 * r(G), r(G)]
    if cell == "lstm":
        aff += [1 + 0.1 * r(H), r(H)]
    m = _reg_masks(cell, 1, B, H, REGS[which], seed=33)
    masks64 = {k: (v if k == "h_mask" else v[0]) for k, v in m.items()}
    inputs64 = [x, h, c, w_ih, w_hh, *aff] if cell == "lstm" else [x, h, w_ih, w_hh, *aff]

    def ref(*t):
        if cell == "lstm":
            new = recurrence.ln_lstm_step(*t, EPS, h_mask=masks64.get("h_mask"))
            old, zones = (t[1], t[2]), (masks64.get("zone_h"), masks64.get("zone_c"))
        else:
            new = (recurrence.ln_gru_step(*t, EPS, h_mask=masks64.get("h_mask")),)
            old, zones = (t[1],), (masks64.get("zone_h"),)
        return tuple(n if z is None else z * o + (1 - z) * n for n, o, z in zip(new, old, zones))

    def fast(*t):
        lib = native.load()
        assert lib is not None
        masks = {k: v.float() for k, v in masks64.items()}
        if cell == "lstm":
            return ops.ln_lstm_step(lib, *t, EPS, **masks)
        return (ops.ln_gru_step(lib, *t, EPS, **masks),)

    assert_step_matches(ref, fast, inputs64, order, {"atol": 3e-4, "rtol": 3e-4},
                        lambda want: [r(*o.shape) for o in want])


# ---- the Triton kernels (CUDA; interpreted over CPU tensors without a GPU) --------------------

@pytest.fixture
def K(monkeypatch):
    """layernorm.kernels with its Triton modules imported (interpreted without a GPU), and the
    operators sent to them."""
    if not HAVE_TRITON:
        pytest.skip("triton is not installed")
    import layernorm.kernels as kernels
    if not ON_GPU:
        from triton.runtime.interpreter import InterpretedFunction

        from layernorm.kernels import _rnn
        if not isinstance(_rnn._lstm_forward_step, InterpretedFunction):
            pytest.skip("triton was imported before TRITON_INTERPRET=1 was set: run with "
                        "TRITON_INTERPRET=1 in the environment")
        monkeypatch.setattr(kernels, "_INTERPRET_CPU", True)
    return kernels


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("which", ["both"])   # each alone: the same kernels' branches, interpreted
def test_triton_kernels_with_regularizers_match_the_torch_ops_path(cell, which, K, monkeypatch):
    """ops.ln_lstm / ops.ln_gru in the Triton kernels with the masks (unsorted lengths: the masks
    stay in the caller's order) against the same call on the torch-ops path in float64 (itself
    tested against the reference above): outputs, states and every gradient."""
    T, B, H = 3, 5, 4
    device = "cuda" if ON_GPU else "cpu"
    args64 = _op_args(cell, T, B, H, input_ln=True, seed=41)
    masks64 = _reg_masks(cell, T, B, H, REGS[which], seed=42)
    lengths = torch.tensor([2, 3, 0, 3, 1])
    calls = []
    real = K.ln_lstm_sequence if cell == "lstm" else K.ln_gru_sequence
    monkeypatch.setattr(K, real.__name__, lambda *a, **k: calls.append(1) or real(*a, **k))
    args = [a.float().to(device).requires_grad_() for a in args64]
    masks = {k: v.float().to(device) for k, v in masks64.items()}
    got = _run_op(cell, args, masks, lengths=lengths)
    assert calls, "the call did not reach the Triton kernels"
    monkeypatch.setattr(K, "_INTERPRET_CPU", False)
    monkeypatch.setattr(native, "USE_NATIVE", False)
    ref_args = [a.clone().requires_grad_() for a in args64]
    want = _run_op(cell, ref_args, masks64, lengths=lengths)
    tol = {"atol": 1e-4, "rtol": 1e-4}
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double().cpu(), b, **tol)
    r = _gen(43)
    w = [r(*o.shape) for o in want]
    g_got = torch.autograd.grad(got, args, [v.float().to(device) for v in w])
    g_want = torch.autograd.grad(want, ref_args, w)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a.double().cpu(), b, **tol)
    with torch.no_grad():                         # the inference path (two cell-state slots)
        monkeypatch.setattr(K, "_INTERPRET_CPU", not ON_GPU)
        again = _run_op(cell, [a.detach() for a in args], masks, lengths=lengths)
    for a, b in zip(again, got):
        torch.testing.assert_close(a, b.detach(), atol=0, rtol=0)
