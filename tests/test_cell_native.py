"""The cells' C step (``ops.cell``: the step after its two GEMMs in one C call, float32
CPU): the paper's equations in float64 (tests/reference.py) forward and backward over awkward
shapes, the torch-ops step it replaces, second order, no_grad, and the paths that must not take
it (torch.func, forward-mode AD, tracing, no bias, no C kernels)."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import layernorm as L
from layernorm import ops
from layernorm.ops import native
from layernorm.rnn import fused

from tests.test_cells_step import _call, _cell, _grads, _reference, _state

pytestmark = pytest.mark.skipif(native.load() is None,
                                reason="the C kernels do not load here")

TOL = {"atol": 2e-5, "rtol": 2e-4}  # float32 against the float64 reference


def _steps(monkeypatch):
    """Count the C steps taken."""
    calls = []
    for where, name in ((ops, "ln_lstm_step"), (ops, "ln_gru_step"),  # the cells' calls
                        (ops.cell, "lstm_step"), (ops.cell, "gru_step")):  # a half step's own
        real = getattr(where, name)
        monkeypatch.setattr(where, name,
                            lambda *a, real=real: calls.append(1) or real(*a))
    return calls


def _pair(mode, I, H):
    """A float32 cell with random gains and biases and its float64 twin."""
    cell = _cell(mode, I, H, dtype=torch.float32)
    twin = _cell(mode, I, H)
    twin.load_state_dict({k: v.double() for k, v in cell.state_dict().items()})
    return cell, twin


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("B,I,H", [(1, 1, 1), (5, 4, 3), (1, 2, 1023), (9, 6, 8)])
def test_c_step_matches_the_reference_and_the_torch_ops_step(monkeypatch, mode, B, I, H):
    cell, twin = _pair(mode, I, H)
    x = torch.randn(B, I) * 2 + 0.3
    state = _state(mode, B, H, dtype=torch.float32)
    leaves = [x.requires_grad_(), *(s.requires_grad_() for s in state)]
    calls = _steps(monkeypatch)
    got = _call(cell, x, state)
    assert calls == [1]
    g_got = _grads(got, leaves + list(cell.parameters()))

    x64 = x.detach().double().requires_grad_()
    s64 = tuple(s.detach().double().requires_grad_() for s in state)
    ref = _reference(mode, twin, x64, s64)
    g_ref = _grads(ref, [x64, *s64, *twin.parameters()])
    monkeypatch.setattr(fused, "USE_NATIVE", False)
    ops = _call(cell, x, state)
    g_ops = _grads(ops, leaves + list(cell.parameters()))
    assert calls == [1]                                   # the torch-ops step ran the second
    for a, r, o in zip(got, ref, ops):
        torch.testing.assert_close(a.double(), r, **TOL)
        torch.testing.assert_close(a, o, **TOL)
    for a, r, o in zip(g_got, g_ref, g_ops):
        torch.testing.assert_close(a.double(), r, **TOL)
        torch.testing.assert_close(a, o, **TOL)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_c_step_second_order_is_the_torch_ops_steps(monkeypatch, mode):
    """create_graph=True differentiates the torch-ops step: second derivatives as exact."""
    cell = _cell(mode, 4, 5, dtype=torch.float32)
    x = torch.randn(3, 4, requires_grad=True)
    state = _state(mode, 3, 5, dtype=torch.float32, requires_grad=True)
    leaves = [x, *state, *cell.parameters()]

    def second():
        first = torch.autograd.grad(sum((o ** 2).sum() for o in _call(cell, x, state)), leaves,
                                    create_graph=True)
        return torch.autograd.grad(sum((g ** 2).sum() for g in first), leaves)
    calls = _steps(monkeypatch)
    got = second()
    assert calls == [1]
    monkeypatch.setattr(fused, "USE_NATIVE", False)
    for a, b in zip(got, second()):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_c_step_without_autograd_and_unbatched(monkeypatch, mode):
    cell = _cell(mode, 4, 3, dtype=torch.float32)
    x, state = torch.randn(2, 4), _state(mode, 2, 3, dtype=torch.float32)
    calls = _steps(monkeypatch)
    with_grad = _call(cell, x, state)
    with torch.no_grad():
        plain = _call(cell, x, state)
    with torch.inference_mode():
        inference = _call(cell, x, state)
    assert len(calls) == 3
    for a, b, c in zip(with_grad, plain, inference):
        assert not b.requires_grad and not c.requires_grad
        torch.testing.assert_close(b, a.detach(), atol=0, rtol=0)
        torch.testing.assert_close(c, a.detach(), atol=0, rtol=0)
    state[0].add_(0)                                     # the inputs are left as they were
    one = _call(cell, x[1], tuple(s[1] for s in state))  # (I,): through the checked path
    for a, b in zip(one, plain):
        torch.testing.assert_close(a, b[1])


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_c_step_outputs_can_be_edited_in_place(mode):
    """The returned states are not what the backward reads: an RL loop may reset them in place
    (h[done] = 0) before the next step, and the gradients are those of the unedited graph."""
    cell = _cell(mode, 4, 3, dtype=torch.float32)
    x, state = torch.randn(2, 4), _state(mode, 2, 3, dtype=torch.float32)
    first = _call(cell, x, state)
    w = [torch.randn_like(o) for o in first]
    want = torch.autograd.grad(sum((o.detach() * v).sum() for o, v in zip(first, w)) +
                               sum((o * v).sum() for o, v in zip(_call(cell, x, state), w)),
                               list(cell.parameters()))
    out = _call(cell, x, state)
    loss = sum((o * v).sum() for o, v in zip(out, w))  # mul saves w, not the state
    for o in out:
        o.mul_(0)
    for a, b in zip(torch.autograd.grad(loss, list(cell.parameters())), want):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_paths_that_need_torch_ops_do_not_take_the_c_step(monkeypatch, mode):
    cell = _cell(mode, 4, 3, dtype=torch.float32)
    x, state = torch.randn(2, 4), _state(mode, 2, 3, dtype=torch.float32)
    want = _call(cell, x, state)
    calls = _steps(monkeypatch)
    names = [n for n, _ in cell.named_parameters()]
    params = {n: p.detach() for n, p in cell.named_parameters()}

    def loss(ps):
        return sum(o.sum() for o in _call_functional(cell, ps, x, state))
    grads = torch.func.grad(loss)(params)                                  # torch.func
    expect = torch.autograd.grad(sum(o.sum() for o in want), list(cell.parameters()))
    for n, g in zip(names, expect):
        torch.testing.assert_close(grads[n], g, **TOL)
    with warnings.catch_warnings():  # jit's deprecation and tracer warnings
        warnings.simplefilter("ignore")
        with fwAD.dual_level():                                            # forward-mode AD
            out = _call(cell, fwAD.make_dual(x, torch.randn_like(x)), state)
            assert fwAD.unpack_dual(out[0]).tangent is not None
        traced = torch.jit.trace(cell, (x, state if len(state) == 2 else state[0]),
                                 check_trace=False)
    torch.testing.assert_close(_call(traced, x, state)[0], want[0], **TOL)  # tracing
    biasless = _cell(mode, 4, 3, dtype=torch.float32, bias=False)
    _call(biasless, x, state)                                              # no bias
    assert calls == []


def _call_functional(cell, params, x, state):
    out = torch.func.functional_call(cell, params, (x, state if len(state) == 2 else state[0]))
    return out if isinstance(out, tuple) else (out,)


def test_modules_at_one_step_take_the_c_step(monkeypatch):
    """layernorm.LSTM / GRU at T = 1 (a decoder's or an agent's step) run the same C step."""
    calls = _steps(monkeypatch)
    for cls in (L.LSTM, L.GRU):
        m = cls(4, 3, num_layers=2)
        x = torch.randn(1, 2, 4, requires_grad=True)
        out = m(x)[0]
        monkeypatch.setattr(fused, "USE_NATIVE", False)
        torch.testing.assert_close(out, m(x)[0], **TOL)
        monkeypatch.setattr(fused, "USE_NATIVE", True)
    assert len(calls) == 4                                 # two layers each


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_half_cells_step_in_float32_and_round_once(monkeypatch, mode, dtype):
    """Without native half GEMMs a half-type cell of 2+ rows runs the float32 C step (the
    conversions differentiable) and rounds its states once: the float32 cell's values to the
    dtype's precision, gradients in the parameters' dtype."""
    if ops.native.half_gemm_native(dtype):
        pytest.skip("this CPU has native half GEMMs: the half-type ops run")
    cell = _cell(mode, 5, 7, dtype=torch.float32)
    x, state = torch.randn(3, 5), _state(mode, 3, 7, dtype=torch.float32)
    want = _call(cell, x, state)
    g_want = _grads(want, list(cell.parameters()))
    half = cell.to(dtype)
    calls = _steps(monkeypatch)
    got = _call(half, x.to(dtype), tuple(s.to(dtype) for s in state))
    assert len(calls) == 2                       # the half call, then its float32 step
    g_got = _grads(got, list(half.parameters()))
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype == torch.float16 else {"atol": 3e-2, "rtol": 3e-2}
    for a, b in zip(got, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b, **tol)
    for a, b in zip(g_got, g_want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b, atol=5 * tol["atol"] * b.abs().max().item(),
                                   rtol=0)
    one = _call(half, x[:1].to(dtype), tuple(s[:1].to(dtype) for s in state))  # one row: ops
    assert len(calls) == 2 and one[0].dtype == dtype


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_c_step_batched_gradients(mode):
    """Batched output gradients (jacobian(vectorize=True), is_grads_batched) reach the
    backward as tensors without storage: it differentiates the torch-ops step instead."""
    cell = _cell(mode, 4, 3, dtype=torch.float32)
    state = _state(mode, 2, 3, dtype=torch.float32)
    x = torch.randn(2, 4)

    def h(a):
        return _call(cell, a, state)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # torch's legacy vmap is deprecated
        fast = torch.autograd.functional.jacobian(h, x, vectorize=True)
    torch.testing.assert_close(fast, torch.autograd.functional.jacobian(h, x), **TOL)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_dispatch_modes_take_the_torch_ops_step(monkeypatch, mode):
    """Under a dispatch mode (fake tensors for shape inference, FLOP counting) the step is torch
    ops the mode can see: fake tensors have no data for C to read."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    calls = _steps(monkeypatch)
    with FakeTensorMode():
        cell = _cell(mode, 4, 3, dtype=torch.float32)
        out = _call(cell, torch.randn(2, 4), _state(mode, 2, 3, dtype=torch.float32))
        assert [tuple(o.shape) for o in out] == [(2, 3)] * len(out)
    cell = _cell(mode, 4, 3, dtype=torch.float32)
    with FlopCounterMode(display=False) as counter:
        _call(cell, torch.randn(2, 4), _state(mode, 2, 3, dtype=torch.float32))
    assert counter.get_total_flops() > 0 and calls == []
