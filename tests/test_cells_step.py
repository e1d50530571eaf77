"""The one-step path (``layernorm.recurrence.ln_*_step``: the cells, and the stacked modules
at T = 1): the paper's equations (tests/reference.py) forward and backward over awkward shapes,
the readable path, autograd of every order, no_grad / inference_mode, unbatched input, half
types, autocast, torch.func and torch.compile."""
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence

import layernorm as L
from layernorm import recurrence
from layernorm.rnn import RNNInputError, RNNTypeError, fused
from tests.reference import ref_gru_step, ref_lstm_step, ref_rnn_step

CELLS = {"LSTM": L.LSTMCell, "GRU": L.GRUCell, "RNN": L.RNNCell}
STACKS = {"LSTM": L.LSTM, "GRU": L.GRU, "RNN": L.RNN}
PAPER = {"weight_ih": "W_x", "weight_hh": "W_h", "bias_ih": "b_x", "bias_hh": "b_h",
         "gain_ih": "g_x", "gain_hh": "g_h", "gain_c": "g_c", "bias_c": "b_c", "gain": "g"}


def _randomize(m):
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith("gain"):
                p.copy_(torch.rand_like(p) + 0.5)
            elif name.startswith("bias"):
                p.copy_(torch.randn_like(p) * 0.5)
    return m


def _cell(mode, I, H, dtype=torch.float64, **kw):
    return _randomize(CELLS[mode](I, H, dtype=dtype, **kw))


def _state(mode, B, H, dtype=torch.float64, requires_grad=False):
    shape = (B, H) if B is not None else (H,)
    n = 2 if mode == "LSTM" else 1
    s = tuple((torch.randn(shape, dtype=dtype) * 0.5).requires_grad_(requires_grad)
              for _ in range(n))
    return s


def _call(cell, x, state):
    out = cell(x, state if len(state) == 2 else state[0])
    return tuple(out) if isinstance(out, tuple) else (out,)


def _reference(mode, cell, x, state, nonlinearity="tanh"):
    """The paper's step, one example at a time (float64)."""
    p = {PAPER[n]: v for n, v in cell.named_parameters()}
    outs = []
    for b in range(x.shape[0]):
        s = tuple(v[b] for v in state)
        if mode == "LSTM":
            outs.append(ref_lstm_step(x[b], s[0], s[1], p, cell.eps))
        elif mode == "GRU":
            outs.append((ref_gru_step(x[b], s[0], p, cell.eps),))
        else:
            outs.append((ref_rnn_step(x[b], s[0], p, nonlinearity, cell.eps),))
    return tuple(torch.stack(v) for v in zip(*outs))


def _grads(outs, inputs):
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum()
               for o in outs)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


@pytest.mark.parametrize("mode,nl", [("LSTM", "tanh"), ("GRU", "tanh"), ("RNN", "tanh"),
                                     ("RNN", "relu")])
@pytest.mark.parametrize("B,I,H", [(1, 1, 1), (5, 4, 3), (1, 2, 1023)])
@pytest.mark.parametrize("bias", [True, False])
def test_one_step_matches_reference_and_readable_path(mode, nl, B, I, H, bias):
    kw = {"nonlinearity": nl} if mode == "RNN" else {}
    cell = _cell(mode, I, H, bias=bias, **kw)
    x = (torch.randn(B, I, dtype=torch.float64) * 2 + 0.3).requires_grad_()
    state = _state(mode, B, H, requires_grad=True)
    inputs = [x, *state, *cell.parameters()]
    calls = []
    real = {m: getattr(recurrence, f"ln_{m.lower()}_step") for m in CELLS}
    with pytest.MonkeyPatch.context() as mp:
        fn = f"ln_{mode.lower()}_step"
        mp.setattr(recurrence, fn, lambda *a: calls.append(1) or real[mode](*a))
        fast = _call(cell, x, state)
    assert calls == [1]                                      # the one-step path ran
    ref = _reference(mode, cell, x, state, nl)
    cell.use_fused = False
    readable = _call(cell, x, state)
    tol = {"atol": 1e-10, "rtol": 1e-9}
    for f, r, q in zip(fast, ref, readable):
        torch.testing.assert_close(f, r, **tol)
        torch.testing.assert_close(f, q, **tol)
    for gf, gr, gq in zip(_grads(fast, inputs), _grads(ref, inputs), _grads(readable, inputs)):
        assert gf is not None and torch.isfinite(gf).all()
        torch.testing.assert_close(gf, gr, **tol)
        torch.testing.assert_close(gf, gq, **tol)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_gradcheck_and_gradgradcheck_float64(mode):
    cell = _cell(mode, 3, 2)
    names = [n for n, _ in cell.named_parameters()]
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    state = _state(mode, 2, 2, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in cell.parameters()]

    def f(x, *rest):
        s, ps = rest[:len(state)], rest[len(state):]
        out = torch.func.functional_call(cell, dict(zip(names, ps)),
                                         (x, s if len(s) == 2 else s[0]))
        return out if isinstance(out, tuple) else (out,)
    args = (x, *state, *params)
    assert torch.autograd.gradcheck(f, args, fast_mode=True)
    assert torch.autograd.gradgradcheck(f, args, fast_mode=True)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_none_cells_are_torch_cells(mode):
    theirs = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.RNNCell}[mode](4, 3)
    ours = CELLS[mode].from_torch(theirs, norm="none")
    x = torch.randn(2, 4)
    state = _state(mode, 2, 3, dtype=torch.float32)
    for a, b in zip(_call(ours, x, state), _call(theirs, x, state)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_no_grad_inference_mode_unbatched(mode):
    cell = _cell(mode, 4, 3, dtype=torch.float32)
    x = torch.randn(2, 4)
    state = _state(mode, 2, 3, dtype=torch.float32)
    with torch.no_grad():
        want = _call(cell, x, state)
    with torch.inference_mode():
        got = _call(cell, x, state)
    for a, b in zip(got, want):
        assert not b.requires_grad
        torch.testing.assert_close(a, b)
    one = _call(cell, x[1], tuple(s[1] for s in state))       # unbatched (I,)
    for a, b in zip(one, want):
        assert a.shape == (3,)
        torch.testing.assert_close(a, b[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_half_types_close_to_float32_and_to_the_readable_path(mode, dtype):
    cell = _cell(mode, 8, 16, dtype=torch.float32)
    x = torch.randn(3, 8)
    state = _state(mode, 3, 16, dtype=torch.float32)
    want = _call(cell, x, state)
    half = cell.to(dtype)
    got = _call(half, x.to(dtype), tuple(s.to(dtype) for s in state))
    half.use_fused = False
    readable = _call(half, x.to(dtype), tuple(s.to(dtype) for s in state))
    for a, b, q in zip(got, want, readable):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b, atol=5e-2, rtol=5e-2)
        torch.testing.assert_close(a, q, atol=1e-2, rtol=1e-2)


def test_autocast_cell_dtype_as_torch_cell():
    """Under CPU autocast torch's cells return float32 (their biases are added after the
    low-precision GEMMs); so do ours, on the readable path."""
    ours, theirs = _cell("LSTM", 8, 16, dtype=torch.float32), nn.LSTMCell(8, 16)
    x = torch.randn(3, 8)
    with torch.autocast("cpu", torch.bfloat16):
        assert all(o.dtype == t.dtype for o, t in zip(ours(x), theirs(x)))
        want = ours(x)
    ours.use_fused = False
    with torch.autocast("cpu", torch.bfloat16):
        for a, b in zip(ours(x), want):
            torch.testing.assert_close(a, b)


def test_torch_func_grad_of_a_cell():
    cell = _cell("LSTM", 4, 3)
    params = {n: p.detach() for n, p in cell.named_parameters()}
    x = torch.randn(2, 4, dtype=torch.float64)

    def loss(ps):
        h, c = torch.func.functional_call(cell, ps, (x,))
        return (h * c).sum()
    got = torch.func.grad(loss)(params)
    want = torch.autograd.grad(loss(dict(cell.named_parameters())), list(cell.parameters()))
    for name, g in zip(params, want):
        torch.testing.assert_close(got[name], g)


def test_compiled_cell_matches_eager():
    cell = _cell("GRU", 4, 3, dtype=torch.float32)
    x, h = torch.randn(2, 4), torch.randn(2, 3)
    compiled = torch.compile(cell, backend="aot_eager", fullgraph=True)
    got = compiled(x, h)
    torch.testing.assert_close(got, cell(x, h))
    g1 = torch.autograd.grad(got.sum(), list(cell.parameters()))
    g2 = torch.autograd.grad(cell(x, h).sum(), list(cell.parameters()))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_stack_at_one_step_matches_the_loop(mode):
    m = _randomize(STACKS[mode](3, 4, num_layers=2, bidirectional=True, dtype=torch.float64))
    x = torch.randn(1, 5, 3, dtype=torch.float64, requires_grad=True)
    packed = pack_sequence([torch.randn(1, 3, dtype=torch.float64) for _ in range(3)])
    fast, fast_packed = m(x), m(packed)
    g_fast = _grads((fast[0],), [x, *m.parameters()])
    m.use_fused = False
    loop, loop_packed = m(x), m(packed)
    g_loop = _grads((loop[0],), [x, *m.parameters()])
    torch.testing.assert_close(fast[0], loop[0])
    torch.testing.assert_close(fast_packed[0].data, loop_packed[0].data)
    for a, b in zip(fast[1] if mode == "LSTM" else (fast[1],),
                    loop[1] if mode == "LSTM" else (loop[1],)):
        torch.testing.assert_close(a, b)
    for a, b in zip(g_fast, g_loop):
        torch.testing.assert_close(a, b)


def test_bn_cell_keeps_the_readable_path_and_its_statistics():
    cell = L.LSTMCell(3, 4, norm="batch", max_length=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(recurrence, "ln_lstm_step", None)                # would fail if called
        cell(torch.randn(5, 3), time_step=1)
    assert cell.num_batches_tracked.tolist() == [0, 1]


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_hot_path_falls_back_to_the_checked_path(mode):
    """The cells' hot path takes only what it can check in a few reads: a tensor set in a
    Parameter's place (weight drop) still computes with that tensor, and every bad input or
    state still gets the checked path's error."""
    cell = _cell(mode, 4, 3)
    x, state = torch.randn(2, 4, dtype=torch.float64), _state(mode, 2, 3)
    dropped = cell.weight_hh.detach() * 0.5
    want = _call(cell, x, state)
    with torch.no_grad():
        twin = _cell(mode, 4, 3)
        twin.load_state_dict(cell.state_dict())
        twin.weight_hh.copy_(dropped)
    del cell._parameters["weight_hh"]
    cell.weight_hh = dropped
    got, ref = _call(cell, x, state), _call(twin, x, state)
    for g, r, w in zip(got, ref, want):
        torch.testing.assert_close(g, r)
        assert not torch.allclose(g, w)
    ok = _cell(mode, 4, 3)
    bad = [(x.float(), state, RNNInputError, "dtype"),
           (x, tuple(s.float() for s in state), RNNInputError, "dtype"),
           (x, tuple(s[:1] for s in state), RNNInputError, "shape"),
           (x[:, :3], state, RNNInputError, "input_size=4"),
           (x.long(), state, RNNTypeError, "floating-point")]
    for xb, sb, exc, words in bad:
        with pytest.raises(exc, match=words):
            _call(ok, xb, sb)


def test_gru_cell_kept_splits_follow_the_parameters(monkeypatch):
    """Without autograd a GRUCell's torch-ops step (here without the C kernels) keeps its gains'
    and biases' splits between calls: in-place updates, new storage (.to), inference mode and
    grad mode all give what a fresh cell gives."""
    monkeypatch.setattr(fused, "USE_NATIVE", False)
    cell = _cell("GRU", 4, 3, dtype=torch.float32)
    x, h = torch.randn(2, 4), torch.randn(2, 3)

    def fresh():
        twin = L.GRUCell(4, 3, dtype=cell.weight_ih.dtype)
        twin.load_state_dict(cell.state_dict())
        with torch.enable_grad():
            return twin(x.to(twin.weight_ih.dtype), h.to(twin.weight_ih.dtype)).detach()

    with torch.no_grad():
        first = cell(x, h)
        torch.testing.assert_close(cell(x, h), first)
        assert "_kept_parts" in cell.__dict__
        for p in cell.parameters():
            p.mul_(1.5).add_(0.1)                    # as an optimizer step does
        torch.testing.assert_close(cell(x, h), fresh())
        assert not torch.allclose(cell(x, h), first)
    with torch.inference_mode():
        torch.testing.assert_close(cell(x, h), fresh())
    cell.double()
    with torch.no_grad():
        torch.testing.assert_close(cell(x.double(), h.double()), fresh())
    out = cell(x.double(), h.double())               # grad mode: the splits are recorded
    grads = torch.autograd.grad(out.sum(), [cell.gain_ih, cell.bias_hh])
    assert all(g.abs().sum() > 0 for g in grads)
