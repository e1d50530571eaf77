"""The fused BN-LSTM and BN-GRU (``layernorm.ops.bn``: the C kernels' time loop with
per-step batch statistics) against the readable path (``BatchTerm`` in THE loop) in float64:
outputs, states, every gradient, running statistics, eval mode, packed sequences, stacks; second
order; population statistics; and that the fused path is the one that runs."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

import layernorm
from layernorm import ops
from layernorm.ops import native

pytestmark = pytest.mark.skipif(native.load() is None,
                                reason="no C compiler: the fused BN-LSTM does not apply")

ATOL, RTOL = 2e-4, 2e-3   # float32 against the float64 reference (B = 2: ill-conditioned BN)


@pytest.fixture
def calls(monkeypatch):
    """The C kernels called, by name."""
    seen = []
    real = native.call

    def spy(lib, kernel, *args, **kwargs):
        seen.append(kernel)
        return real(lib, kernel, *args, **kwargs)
    monkeypatch.setattr(native, "call", spy)
    return seen


def _pair(I, H, *, seed=0, mode="LSTM", **kw):
    """A float32 BN-LSTM / BN-GRU with random gains and biases, and its float64 readable twin."""
    torch.manual_seed(seed)
    m = getattr(layernorm, mode)(I, H, norm="batch", **kw)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.uniform_(-1, 1)
    ref = copy.deepcopy(m).double()
    ref.use_fused = False
    return m, ref


def _close(a, b, msg=""):
    torch.testing.assert_close(a.double(), b.double(), atol=ATOL, rtol=RTOL, msg=msg)


def _inputs(T, B, I, lengths=None, layers=1, dirs=1, H=4, n_states=2):
    """x (padded or packed) and the initial states (h0, c0) or (h0,)."""
    if lengths is None:
        x = torch.randn(T, B, I)
    else:
        x = [torch.randn(n, I) for n in lengths]
    hx = tuple(torch.randn(layers * dirs, B, H) for _ in range(n_states))
    return x, hx


def _leaf(t, dtype):
    return t.detach().to(dtype).requires_grad_()


def _run(m, x, hx, dtype, grad_seed=1):
    """One training (or eval) step: forward, a random loss's backward -> out, the final states,
    the input grads, the initial states' grads."""
    if isinstance(x, list):
        xs = [_leaf(s, dtype) for s in x]
        inp, leaves = pack_sequence(xs), xs
    else:
        inp = _leaf(x, dtype)
        leaves = [inp]
    states = [_leaf(h, dtype) for h in hx]
    out, final = m(inp, tuple(states) if len(states) == 2 else states[0])
    final = final if isinstance(final, tuple) else (final,)
    if isinstance(out, torch.nn.utils.rnn.PackedSequence):
        out = pad_packed_sequence(out)[0]
    g = torch.Generator().manual_seed(grad_seed)
    loss = sum((t * torch.randn(t.shape, generator=g, dtype=torch.float64).to(dtype)).sum()
               for t in (out, *final))
    loss.backward()
    return out, final, [v.grad for v in leaves], [s.grad for s in states]


def _compare(m, ref, x, hx):
    got, want = _run(m, x, hx, torch.float32), _run(ref, x, hx, torch.float64)
    _close(got[0], want[0], "out")
    for a, b in zip(got[1], want[1]):
        _close(a, b, "final state")
    for a, b in zip(got[2], want[2]):
        _close(a, b, "input grad")
    for a, b in zip(got[3], want[3]):
        _close(a, b, "initial state grad")
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        _close(p.grad, q.grad, name)
        assert p.grad.abs().sum() > 0 or not q.grad.abs().sum() > 0, name
    for (name, b), r in zip(m.named_buffers(), ref.buffers()):
        if name == "num_batches_tracked":
            assert torch.equal(b, r)
        else:
            _close(b, r, name)
    m.zero_grad()
    ref.zero_grad()


CONFIGS = [  # (T, B, I, H, layers, bidirectional, lengths, max_length)
    (6, 5, 3, 4, 1, False, None, 10),
    (5, 2, 3, 1, 1, False, None, 10),          # B = 2, H = 1
    (5, 2, 2, 3, 1, False, None, 10),          # H = 3
    (4, 9, 5, 127, 1, False, None, 10),        # H = 127: a partial GEMM panel
    (7, 16, 4, 8, 2, True, None, 10),          # 2 layers, bidirectional, 2 threads' blocks
    (8, 6, 3, 5, 1, False, None, 4),           # steps past max_length keep no statistics
    (6, 4, 3, 4, 2, True, [6, 6, 3, 2], 10),   # packed, unequal lengths, >= 2 active
    (6, 4, 3, 4, 1, False, [6, 3, 2, 2], 10),  # packed: steps 3.. have one active example
]


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("T,B,I,H,layers,bidir,lengths,max_length", CONFIGS)
def test_fused_bn_matches_the_readable_reference(calls, mode, T, B, I, H, layers, bidir, lengths,
                                                 max_length):
    m, ref = _pair(I, H, mode=mode, num_layers=layers, bidirectional=bidir,
                   max_length=max_length)
    dirs, n_states = 2 if bidir else 1, 2 if mode == "LSTM" else 1
    x, hx = _inputs(T, B, I, lengths, layers, dirs, H, n_states)
    for step in range(2):           # two training steps: running statistics, then eval
        _compare(m, ref, x, hx)
        x2, _ = _inputs(T, B, I, lengths, layers, dirs, H, n_states)
        x = x2 if step == 0 else x
    kernel = f"bn_{mode.lower()}_forward_seq"
    assert calls.count(kernel) >= 2 * layers * dirs   # the fused path ran
    m.eval()
    ref.eval()
    _compare(m, ref, x, hx)        # eval: running statistics of slot min(t, last trained)
    _compare(m, ref, *_inputs(T + 3, 1, I, None, layers, dirs, H, n_states))  # batch 1, longer
    with torch.no_grad():           # inference: nothing saved, same numbers
        outs = []
        for module, dtype in ((m, torch.float32), (ref, torch.float64)):
            xs = (pack_sequence([s.to(dtype) for s in x]) if isinstance(x, list)
                  else x.to(dtype))
            states = tuple(h.to(dtype) for h in hx)
            out = module(xs, states if len(states) == 2 else states[0])[0]
            outs.append(pad_packed_sequence(out)[0] if isinstance(x, list) else out)
    _close(*outs, "no-grad output")

@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_fused_path_is_taken_where_it_applies(calls, mode):
    m, ref = _pair(3, 4, mode=mode)
    x = torch.randn(5, 4, 3)
    m(x)[0].sum().backward()
    cell = f"bn_{mode.lower()}"
    assert calls[0] == f"{cell}_forward_seq"          # the backward: in ranges of steps
    assert set(calls[1:]) == {f"{cell}_backward_seq"}
    calls.clear()
    ref(x.double())[0].sum().backward()            # float64: the readable path
    m.use_fused = False
    m(x)[0].sum().backward()
    assert calls == []
    m.use_fused = True
    with torch.autocast("cpu", torch.bfloat16):    # autocast: the readable path
        m(x)
    assert calls == []
    ln = getattr(layernorm, mode)(3, 4, norm="layer")   # LN: its own operator, not this one
    ln(x)[0].sum().backward()
    assert f"{cell}_forward_seq" not in calls
    rnn = layernorm.RNN(3, 4, norm="batch")         # RNN: the readable path
    rnn(x)[0].sum().backward()
    assert not any(c.startswith("bn_") for c in calls)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_training_with_one_example_raises_as_the_readable_path(calls, mode):
    m, ref = _pair(3, 4, mode=mode)
    for module in (m, ref):
        with pytest.raises(ValueError, match="more than one value per channel"):
            module(torch.randn(3, 1, 3, dtype=module.weight_ih_l0.dtype))
        with pytest.raises(ValueError, match="more than one value per channel"):
            module(pack_sequence([torch.randn(3, 3, dtype=module.weight_ih_l0.dtype)]))
    assert calls == []
    assert m.num_batches_tracked.sum() == 0


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_second_order_matches_the_reference(calls, mode):
    """create_graph=True: the backward re-runs the recurrence differentiably."""
    m, ref = _pair(3, 4, mode=mode, max_length=10)
    x = torch.randn(5, 4, 3)
    results = []
    for module, dtype in ((m, torch.float32), (ref, torch.float64)):
        xi = x.to(dtype).requires_grad_()
        out, state = module(xi)
        last = state[1] if isinstance(state, tuple) else state
        params = list(module.parameters())
        grads = torch.autograd.grad(out.pow(2).sum() + last.sum(), [xi] + params,
                                    create_graph=True)
        penalty = sum(g.pow(2).sum() for g in grads)
        results.append(torch.autograd.grad(penalty, [xi] + params))
    assert f"bn_{mode.lower()}_forward_seq" in calls
    for a, b in zip(*results):   # float32 rounding relative to the largest entry (~100 here)
        torch.testing.assert_close(a.double(), b, atol=ATOL * max(1.0, b.abs().max().item()),
                                   rtol=RTOL, msg="second derivative")


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_gradcheck_and_gradgradcheck_of_the_float64_path(mode):
    """float64 takes the readable path: its first and second derivatives are exact."""
    torch.manual_seed(0)
    m = getattr(layernorm, mode)(2, 3, norm="batch", dtype=torch.float64)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.uniform_(-1, 1)
    x = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    w = m.weight_hh_l0

    def fn(x, h0, c0, w_hh):
        hx = (h0, c0) if mode == "LSTM" else h0 + c0
        out, state = torch.func.functional_call(m, {"weight_hh_l0": w_hh}, (x, hx))
        return (out, *state) if isinstance(state, tuple) else (out, state)
    torch.autograd.gradcheck(fn, (x, h0, c0, w))
    torch.autograd.gradgradcheck(fn, (x, h0, c0, w))


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_recompute_batch_stats_is_unchanged(calls, mode):
    """Population statistics through observe_batch_stats: the fused path reports its batch
    statistics, and the result is the readable path's."""
    torch.manual_seed(0)
    batches = [torch.randn(6, 5, 3) for _ in range(3)] + [
        pack_sequence([torch.randn(n, 3) for n in (6, 4, 2, 1)])]
    found = []
    for fused in (True, False):
        m, _ = _pair(3, 4, mode=mode, max_length=5)
        m.use_fused = fused
        assert layernorm.recompute_batch_stats(m, batches, forward=lambda mod, b: mod(b)) == 1
        found.append({k: v.clone() for k, v in m.state_dict().items() if "running" in k
                      or "tracked" in k})
    assert f"bn_{mode.lower()}_forward_seq" in calls
    for k in found[0]:
        torch.testing.assert_close(found[0][k], found[1][k], atol=1e-5, rtol=1e-5, msg=k)
