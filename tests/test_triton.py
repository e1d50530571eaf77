"""The Triton kernels (layernorm.kernels) against the float64 references, forward and backward.

Without a GPU the kernels run under triton's interpreter (TRITON_INTERPRET=1) over CPU tensors:
slow, so the shapes are tiny (T = 3) and the cases few. With CUDA the same tests run the compiled
kernels on the GPU. Skipped when triton is not installed (``pip install -e '.[test]'``).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import TOL
from tests.reference import (ref_layer_norm, ref_ln_gru_sequence, ref_ln_lstm_sequence,
                             ref_rms_norm)

HAVE_TRITON = importlib.util.find_spec("triton") is not None
ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if ON_GPU else "cpu"
if HAVE_TRITON and not ON_GPU and "triton" not in sys.modules:
    # Interpreter mode is read when triton (and each kernel) is imported, and again by triton's
    # own lazy imports: so it is set at collection, before any test (torch.compile imports
    # triton too), and stays set for the session. No CPU test compiles with triton.
    os.environ["TRITON_INTERPRET"] = "1"
# with a GPU these run the compiled kernels: part of the `-m cuda` selection then
pytestmark = [pytest.mark.cuda] if ON_GPU else []
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install "
                                                          "-e '.[test]' installs it)")


@pytest.fixture(scope="module")
def K():
    """layernorm.kernels with its Triton modules imported (interpreted without a GPU)."""
    if not HAVE_TRITON:
        pytest.skip("triton is not installed")
    import layernorm.kernels as kernels
    if not ON_GPU:
        from triton.runtime.interpreter import InterpretedFunction

        from layernorm.kernels import _rnn
        if not isinstance(_rnn._lstm_forward_step, InterpretedFunction):
            pytest.skip("triton was imported before this module set TRITON_INTERPRET=1: run "
                        "with TRITON_INTERPRET=1 in the environment")
    kernels._INTERPRET_CPU = not ON_GPU
    yield kernels
    kernels._INTERPRET_CPU = False


def _close(got, ref, dtype, what):
    """got vs the float64 ref, with the dtype's tolerance scaled by ref's magnitude."""
    atol, rtol = TOL[dtype]
    got, ref = got.detach(), ref.detach()
    scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
    torch.testing.assert_close(got.double().cpu(), ref.cpu(), atol=atol * scale, rtol=rtol,
                               msg=lambda m: f"{what}: {m}")


def test_cpu_users_never_need_triton():
    # torch itself may import triton when it is installed (torch.library's custom ops load
    # torch._dynamo, which probes for it), so the test hides triton: the CPU paths must work, and
    # warn about nothing, without it, and layernorm's own Triton modules must stay unloaded.
    code = ("import sys, warnings\n"
            "sys.modules['triton'] = None\n"
            "warnings.simplefilter('error')\n"
            "import torch, layernorm, layernorm.rnn, layernorm.functional as LF, "
            "layernorm.kernels as K\n"
            "m = layernorm.LSTM(4, 3)\n"
            "m(torch.randn(2, 1, 4))[0].sum().backward()\n"
            "layernorm.GRU(4, 3)(torch.randn(2, 1, 4))[0].sum().backward()\n"
            "LF.rms_norm(torch.randn(2, 4), 4)\n"
            "LF.layer_norm(torch.randn(2, 4), 4)\n"
            "assert not K.applies_rnn(torch.randn(2)), 'CPU tensors never go to triton'\n"
            "loaded = [n for n in sys.modules if n.startswith('layernorm.kernels._')]\n"
            "assert not loaded, f'Triton modules loaded: {loaded}'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(["src", os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr


def test_which_calls_run_in_the_kernels(monkeypatch):
    import layernorm.kernels as kernels
    monkeypatch.setattr(kernels, "_INTERPRET_CPU", False)
    x = torch.randn(2, 3)
    assert not kernels.applies_rnn(x) and not kernels.applies_norm(x, "rms_norm")
    monkeypatch.setattr(kernels, "_INTERPRET_CPU", True)  # as if x were a CUDA tensor
    monkeypatch.setattr(kernels, "_AVAILABLE", True)
    assert kernels.applies_rnn(x) and kernels.applies_norm(x, "rms_norm")
    assert not kernels.applies_rnn(x.double()), "float64 keeps the torch ops"
    assert not kernels.applies_rnn(x[:0]), "empty batches keep the torch ops"
    assert not kernels.applies_norm(x, "layer_norm"), "torch's fused layer_norm is kept"
    assert kernels.applies_norm(x.bfloat16(), "layer_norm", torch.ones(3)), "mixed dtypes"
    monkeypatch.setattr(kernels, "ENABLED", False)
    assert not kernels.applies_rnn(x) and not kernels.applies_norm(x, "rms_norm")


# ---------------------------------------------------------------------------------------------
# LayerNorm / RMSNorm
# ---------------------------------------------------------------------------------------------

@needs_triton
@pytest.mark.parametrize("N, dtype, chunked", [
    (1, torch.float32, False), (3, torch.float32, False), (64, torch.float32, False),
    (257, torch.float32, False), (257, torch.bfloat16, False), (257, torch.float32, True)])
@pytest.mark.parametrize("center", [True, False], ids=["layer", "rms"])
def test_norm_matches_reference(K, monkeypatch, N, dtype, chunked, center):
    from layernorm.kernels import _norms
    if chunked:  # rows longer than one block: statistics and output in column chunks
        monkeypatch.setattr(_norms, "ONE_BLOCK_MAX", 0)
        monkeypatch.setattr(_norms, "ONE_BLOCK_MAX_BACKWARD", 0)
        monkeypatch.setattr(_norms, "CHUNK", 16)
    g = torch.Generator().manual_seed(N)
    x = (torch.randn(5, 2, N, generator=g) * 3 + 1).to(DEVICE, dtype).requires_grad_()
    w = (1 + 0.5 * torch.randn(N, generator=g)).to(DEVICE, dtype).requires_grad_()
    b = torch.randn(N, generator=g).to(DEVICE, dtype).requires_grad_()
    dy = torch.randn(5, 2, N, generator=g).to(DEVICE, dtype)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    if center:
        y, params = K.layer_norm(x, (N,), w, b), (x, w, b)
        ref, params64 = ref_layer_norm(x64, 1, w64, b64), (x64, w64, b64)
    else:
        y, params = K.rms_norm(x, (N,), w), (x, w)
        ref, params64 = ref_rms_norm(x64, 1, w64), (x64, w64)
    assert y.dtype == dtype and y.shape == x.shape
    _close(y, ref, dtype, "y")
    grads = torch.autograd.grad(y, params, dy)
    refs = torch.autograd.grad(ref, params64, dy.double())
    for name, got, want in zip("xwb", grads, refs):
        assert got.dtype == dtype
        _close(got, want, dtype, f"d{name}")


@needs_triton
def test_norm_mixed_dtypes_and_shapes(K):
    """bf16 input with float32 gain/bias (output bf16, grads in each tensor's dtype), a 2-D
    normalized_shape, and no affine parameters."""
    x = torch.randn(3, 4, 5, device=DEVICE).bfloat16().requires_grad_()
    w = torch.randn(4, 5, device=DEVICE, requires_grad=True)
    b = torch.randn(4, 5, device=DEVICE, requires_grad=True)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    y = K.layer_norm(x, (4, 5), w, b)
    ref = ref_layer_norm(x64, 2, w64, b64)
    assert y.dtype == torch.bfloat16
    _close(y, ref, torch.bfloat16, "y")
    dy = torch.randn_like(ref).bfloat16()
    for name, got, want in zip("xwb", torch.autograd.grad(y, (x, w, b), dy),
                               torch.autograd.grad(ref, (x64, w64, b64), dy.double())):
        assert got.dtype == (torch.bfloat16 if name == "x" else torch.float32)
        _close(got, want, torch.bfloat16, f"d{name}")
    x32 = x.detach().float().requires_grad_()
    y = K.rms_norm(x32, (4, 5))
    _close(y, ref_rms_norm(x64, 2), torch.float32, "rms without weight")
    (dx,) = torch.autograd.grad(y.sum(), x32)
    (rx,) = torch.autograd.grad(ref_rms_norm(x64, 2).sum(), x64)
    _close(dx, rx, torch.float32, "rms dx")


@needs_triton
def test_functional_hooks_use_the_kernels(K, monkeypatch):
    """layernorm.functional's layer_norm / rms_norm send tensors the kernels take to them."""
    import layernorm.functional as LF
    calls = []
    for name in ("layer_norm", "rms_norm"):
        fn = getattr(K, name)
        monkeypatch.setattr(K, name, lambda *a, _fn=fn, _n=name, **k: calls.append(_n) or
                            _fn(*a, **k))
    x = torch.randn(4, 8, device=DEVICE)
    w = torch.randn(8, device=DEVICE)
    _close(LF.rms_norm(x, 8, w), ref_rms_norm(x, 1, w), torch.float32, "rms_norm")
    monkeypatch.setitem(K.NORMS, "layer_norm", True)
    _close(LF.layer_norm(x, 8, w, w), ref_layer_norm(x, 1, w, w), torch.float32, "layer_norm")
    assert calls == ["rms_norm", "layer_norm"]


# ---------------------------------------------------------------------------------------------
# LN-LSTM / LN-GRU
# ---------------------------------------------------------------------------------------------

def _tensors(mode: str, T: int, B: int, H: int, dtype, input_ln: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, mean=0.0):
        return (mean + scale * torch.randn(*shape, generator=g)).to(DEVICE, dtype) \
            .requires_grad_()

    k = 4 if mode == "LSTM" else 3
    ts = {"xg": r(T, B, k * H), "h0": r(B, H, scale=0.5)}
    if mode == "LSTM":
        ts["c0"] = r(B, H, scale=0.5)
    ts["w_hh"] = r(k * H, H, scale=H ** -0.5)
    if mode == "LSTM":
        ts.update(gain_h=r(4 * H, scale=0.2, mean=1), bias_h=r(4 * H, scale=0.2),
                  gain_c=r(H, scale=0.2, mean=1), bias_c=r(H, scale=0.2))
    else:
        ts.update(gain_h=r(2 * H, scale=0.2, mean=1), bias_h=r(2 * H, scale=0.2),
                  gain_u=r(H, scale=0.2, mean=1), bias_u=r(H, scale=0.2))
    if input_ln:
        ts.update(gain_x=r(k * H, scale=0.2, mean=1), bias_x=r(k * H, scale=0.2))
    return ts


def _reference(mode: str, ts: dict, lengths):
    """The float64 reference on float64 copies of ts (input LN applied outside)."""
    d = {k: v.detach().double().requires_grad_() for k, v in ts.items()}
    H = d["h0"].shape[-1]
    xg = d["xg"]
    if "gain_x" in d:
        groups = (4 * H,) if mode == "LSTM" else (2 * H, H)
        xg = torch.cat([F.layer_norm(x, (x.shape[-1],), gx, bx, 1e-5) for x, gx, bx in
                        zip(xg.split(groups, -1), d["gain_x"].split(groups),
                            d["bias_x"].split(groups))], -1)
    if mode == "LSTM":
        out = ref_ln_lstm_sequence(xg, d["h0"], d["c0"], d["w_hh"], d["gain_h"], d["bias_h"],
                                   d["gain_c"], d["bias_c"], lengths)
    else:
        out = ref_ln_gru_sequence(xg, d["h0"], d["w_hh"], d["gain_h"], d["bias_h"], d["gain_u"],
                                  d["bias_u"], lengths)
    return d, out


def _run(K, mode, ts, lengths):
    fn = K.ln_lstm_sequence if mode == "LSTM" else K.ln_gru_sequence
    return fn(**ts, lengths=lengths)


RNN_CASES = [  # (H, B, lengths, input LN in the kernel, dtype)
    (3, 5, [3, 0, 2, 3, 1], True, torch.float32),
    (64, 2, None, False, torch.float32),
    (257, 1, None, True, torch.float32),
    (1, 3, [1, 3, 0], False, torch.float32),
    (64, 3, [2, 0, 3], True, torch.bfloat16),
]


@needs_triton
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("H, B, lengths, input_ln, dtype", RNN_CASES,
                         ids=[f"H{c[0]}-B{c[1]}-{'len' if c[2] else 'full'}-"
                              f"{'xln' if c[3] else 'xg'}-{str(c[4])[6:]}" for c in RNN_CASES])
def test_recurrence_matches_reference(K, mode, H, B, lengths, input_ln, dtype):
    T = 3
    ts = _tensors(mode, T, B, H, dtype, input_ln)
    lens = None if lengths is None else torch.tensor(lengths)
    outs = _run(K, mode, ts, lens)
    d, refs = _reference(mode, ts, lens)
    names = ("out", "h_n", "c_n")
    for name, got, want in zip(names, outs, refs):
        assert got.dtype == dtype and got.shape == want.shape
        _close(got, want, dtype, name)
    if lens is not None:  # past its length an example outputs 0
        dead = torch.arange(T).unsqueeze(1) >= lens.unsqueeze(0)
        assert (outs[0].cpu()[dead] == 0).all()
    g = torch.Generator().manual_seed(1)
    upstream = [torch.randn(o.shape, generator=g).to(DEVICE, dtype) for o in outs]
    grads = torch.autograd.grad(outs, list(ts.values()), upstream)
    ref_grads = torch.autograd.grad(refs, list(d.values()), [u.double() for u in upstream])
    for name, got, want in zip(ts, grads, ref_grads):
        assert got.dtype == dtype and got.shape == want.shape, name
        assert torch.isfinite(got).all(), name
        _close(got, want, dtype, f"d{name}")


@needs_triton
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_recurrence_without_grad_matches_with_grad(K, mode):
    """Inference (nothing saved, two cell-state buffers) gives the training forward's results."""
    ts = _tensors(mode, 3, 3, 3, torch.float32, True)
    lens = torch.tensor([3, 0, 2])
    with_grad = _run(K, mode, ts, lens)
    with torch.no_grad():
        without = _run(K, mode, ts, lens)
    for a, b in zip(with_grad, without):
        torch.testing.assert_close(a.detach(), b, atol=0, rtol=0)


@needs_triton
def test_recurrence_rejects_bad_lengths(K):
    ts = _tensors("GRU", 3, 2, 3, torch.float32, False)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        _run(K, "GRU", ts, torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="integer tensor of shape"):
        _run(K, "GRU", ts, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="gain_x and bias_x together"):
        K.ln_gru_sequence(**ts, gain_x=ts["gain_h"])


@needs_triton
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_modules_run_the_kernels_through_the_fused_hook(K, monkeypatch, mode):
    """layernorm.LSTM / GRU (norm="layer") reach the kernels through rnn.fused and give the
    results of the loop of torch ops (the readable reference path)."""
    import layernorm
    from layernorm.rnn import fused
    calls = []
    name = "ln_lstm_sequence" if mode == "LSTM" else "ln_gru_sequence"
    fn = getattr(K, name)
    monkeypatch.setattr(K, name, lambda *a, **k: calls.append(1) or fn(*a, **k))
    torch.manual_seed(0)
    m = getattr(layernorm, mode)(4, 3).to(DEVICE)
    x = torch.randn(3, 2, 4, device=DEVICE, requires_grad=True)
    out, _ = m(x)
    (dx,) = torch.autograd.grad(out.square().sum(), x)
    assert calls == [1]
    monkeypatch.setattr(K, "ENABLED", False)
    monkeypatch.setattr(fused, "USE_NATIVE", False)
    monkeypatch.setattr(type(m), "use_fused", False)
    out_ref, _ = m(x)
    (dx_ref,) = torch.autograd.grad(out_ref.square().sum(), x)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dx, dx_ref, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Autograd to any order, as on the CPU (docs/rnnfast.md)
# ---------------------------------------------------------------------------------------------

def _second_order(outs, inputs, seed=2):
    """(first-order grads under create_graph=True, grads of sum(first * v) w.r.t. inputs)."""
    g = torch.Generator().manual_seed(seed)
    upstream = [torch.randn(o.shape, generator=g).to(o) for o in outs]
    first = torch.autograd.grad(outs, inputs, upstream, create_graph=True)
    probe = sum((f * torch.randn(f.shape, generator=g).to(f)).sum() for f in first)
    return first, torch.autograd.grad(probe, inputs, allow_unused=True)


@needs_triton
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_recurrence_second_order_as_on_the_cpu(K, monkeypatch, mode):
    """The Triton path (chosen before the registered operator) differentiates twice: under
    create_graph=True its backward runs the reference recurrence, so first and second order
    equal the CPU path's (which differentiates the same reference), here with unsorted lengths,
    the input LN and all recurrent regularizers on (their masks in the batch's order)."""
    from layernorm.ops import sequence
    T, B, H = 3, 3, 3
    ts = _tensors(mode, T, B, H, torch.float32, True)
    g = torch.Generator().manual_seed(5)
    masks = {"h_mask": (torch.rand(B, H, generator=g) > 0.3).float() / 0.7,
             "zone_h": (torch.rand(T, B, H, generator=g) > 0.5).float()}
    if mode == "LSTM":
        masks["zone_c"] = (torch.rand(T, B, H, generator=g) > 0.5).float()
    fn = sequence.ln_lstm_sequence if mode == "LSTM" else sequence.ln_gru_sequence
    lens = torch.tensor([2, 3, 1])
    inputs = list(ts.values())

    outs = fn(**ts, lengths=lens, **{k: v.to(DEVICE) for k, v in masks.items()})
    assert type(outs[0].grad_fn).__name__ == f"_{mode}FunctionBackward", "not the Triton path"
    first, second = _second_order(outs, inputs)
    # the Triton backward's own first order (without create_graph), same upstream gradients
    g = torch.Generator().manual_seed(2)
    plain = torch.autograd.grad(fn(**ts, lengths=lens, **masks), inputs,
                                [torch.randn(o.shape, generator=g).to(o) for o in outs])
    monkeypatch.setattr(K, "ENABLED", False)    # the CPU path: C kernels / registered operator
    outs_cpu = fn(**ts, lengths=lens, **masks)
    assert type(outs_cpu[0].grad_fn).__name__ != f"_{mode}FunctionBackward"
    first_cpu, second_cpu = _second_order(outs_cpu, inputs)
    for name, a, b, c in zip(ts, first, first_cpu, plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"d{name}: {m}")
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5, msg=lambda m: f"d{name}: {m}")
    for name, a, b in zip(ts, second, second_cpu):
        assert (a is None) == (b is None), name
        if a is not None:
            assert float(a.abs().max()) > 0, name
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5,
                                       msg=lambda m: f"d2/d{name}: {m}")


@needs_triton
@pytest.mark.parametrize("center", [True, False], ids=["layer", "rms"])
def test_norm_second_order_matches_reference(K, center):
    """The norm kernels differentiate twice: under create_graph=True the backward is the
    readable normalization's, so second order equals the float64 reference's."""
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(3, 4, 5, generator=g) * 2 + 1).to(DEVICE).requires_grad_()
    w = (1 + 0.5 * torch.randn(4, 5, generator=g)).to(DEVICE).requires_grad_()
    b = torch.randn(4, 5, generator=g).to(DEVICE).requires_grad_()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    if center:
        y, params = K.layer_norm(x, (4, 5), w, b), (x, w, b)
        ref, params64 = ref_layer_norm(x64, 2, w64, b64), (x64, w64, b64)
    else:
        y, params = K.rms_norm(x, (4, 5), w), (x, w)
        ref, params64 = ref_rms_norm(x64, 2, w64), (x64, w64)
    assert type(y.grad_fn).__name__ == "_NormFunctionBackward", "not the Triton path"
    first, second = _second_order([y], params)
    first64, second64 = _second_order([ref], params64)
    plain = torch.autograd.grad(y, params, torch.randn(y.shape, generator=torch.Generator()
                                                       .manual_seed(2)).to(y))
    for name, a, b_, c in zip("xwb", first, first64, plain):
        _close(a, b_, torch.float32, f"d{name}")
        _close(c, b_, torch.float32, f"d{name} (the Triton backward)")
    for name, a, b_ in zip("xwb", second, second64):
        assert (a is None) == (b_ is None), name
        if a is not None:
            assert float(b_.abs().max()) > 0, name
            _close(a, b_, torch.float32, f"d2/d{name}")
