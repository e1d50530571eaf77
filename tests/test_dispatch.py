"""Which implementation each operator entry runs under each runtime condition this CPU can
produce (``layernorm.ops.native``, docs/rnnfast.md "Where a call runs"), and that the
implementation chosen computes the float64 reference's result there.

Each table row: a condition (a context the call runs in, or a transform wrapped around it), the
inputs' dtype, and the implementation expected. The implementations are watched by spies
(monkeypatch) that record their name and call the real function. Cheap: tiny shapes, no
compilation (torch.compile / torch.export / the ONNX exporter are in test_fused.py and
test_torch_dropin.py; here the ONNX capture is simulated by answering its three questions).
"""
from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.nn.utils.rnn import PackedSequence, pack_sequence
from torch.utils._python_dispatch import TorchDispatchMode

import layernorm
from layernorm import kernels, recurrence
from layernorm.ops import bn as ops_bn
from layernorm.ops import cell as ops_cell
from layernorm.ops import gemm, inference, native
from layernorm.ops import gru as ops_gru
from layernorm.ops import lstm as ops_lstm
from layernorm.ops import sequence as ops_sequence
from layernorm.ops import sequence
from tests.conftest import TOL
from tests.reference import (ref_gru_step, ref_ln_gru_sequence, ref_ln_lstm_sequence,
                             ref_lstm_step, ref_recurrent, ref_rnn_step)
from tests.test_fused import make_args
from tests.test_rnn import _paper_params, _randomize
from tests.test_torch_dropin import _quiet

needs_c = pytest.mark.skipif(native.load() is None, reason="no C compiler: the C kernels are "
                                                           "unavailable (torch ops run)")


with warnings.catch_warnings():     # forward AD's first use (torch.func.jvp's too) loads torch's
    warnings.simplefilter("ignore", DeprecationWarning)   # decompositions with a deprecated
    with fwAD.dual_level():                                # torch.jit.script: done here, once
        fwAD.make_dual(torch.zeros(1), torch.zeros(1))


class _Passthrough(TorchDispatchMode):
    """A dispatch mode that changes nothing (as a profiler's or a debugger's would)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Sub(torch.Tensor):
    """A tensor subclass with torch's default behaviour."""


@contextlib.contextmanager
def _onnx_capture(monkeypatch):
    """torch.onnx.export's capture as ``where`` sees it (compiling, exporting, in ONNX export),
    without running the exporter (test_torch_dropin.py runs it)."""
    with monkeypatch.context() as m:
        m.setattr(native, "_compiling", lambda: True)
        m.setattr(torch.compiler, "is_exporting", lambda: True)
        m.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
        yield


def _close(got, want, dtype):
    atol, rtol = TOL[dtype]
    got, want = got.detach().double(), want.detach().double()
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    torch.testing.assert_close(got, want,
                               atol=atol * scale, rtol=rtol)


# ---- where: the answers ----------------------------------------------------------------------

def test_where_answers_each_question(monkeypatch):
    x = torch.randn(2, 3)
    w = native.where(x)
    assert w.eager and not w.transformed and w.autocast is None and not w.onnx \
        and not w.triton
    assert (w.lib is not None) == (native.load() is not None)
    with _Passthrough():
        assert not native.where(x).eager
    assert not native.where(x, x.as_subclass(_Sub)).eager, "a subclass among the tensors"
    assert not native.where(x.as_subclass(_Sub)).eager
    assert native.where(x, None, [1, 2], torch.nn.Parameter(x)).eager

    traced = []
    _quiet(lambda: torch.jit.trace(lambda t: (traced.append(native.where(t)), t * 2)[1], (x,)))
    assert not traced[0].eager

    with fwAD.dual_level():
        assert native.where(fwAD.make_dual(x, x)).transformed
    assert not native.where(x).transformed, "after the dual level"
    seen = []
    torch.func.grad(lambda t: (seen.append(native.where(t)), t.sum())[1])(x)
    torch.func.vmap(lambda t: (seen.append(native.where(t)), t)[1])(x)
    assert all(s.transformed for s in seen) and len(seen) == 2

    with torch.autocast("cpu", torch.bfloat16):
        assert native.where(x).autocast == torch.bfloat16
        assert native.where(x).c(x) is None
    monkeypatch.setattr(layernorm.rnn.fused, "USE_NATIVE", False)     # the public switch
    assert native.where(x).lib is None and native.where(x).c(x) is None
    monkeypatch.setattr(layernorm.rnn.fused, "USE_NATIVE", True)
    with _onnx_capture(monkeypatch):
        w = native.where(x)
        assert w.onnx and not w.eager and not w.transformed and w.c(x) is None

    if native.load() is not None:
        w = native.where(x)
        assert w.c(x) is w.lib and w.c(x.double()) is None
        assert w.c(x.bfloat16(), dtypes=(torch.bfloat16,)) is w.lib
        assert w.c(x, x.to("meta")) is None, "every tensor on the CPU"

    monkeypatch.setattr(kernels, "_INTERPRET_CPU", True)      # as if x were a CUDA tensor
    monkeypatch.setattr(kernels, "_AVAILABLE", True)
    assert native.where(x, rnn=True).triton and not native.where(x.double(), rnn=True).triton
    assert not native.where(x).triton, "asked by the LN sequence operators only"


# ---- the LN sequence operators (ln_lstm_sequence / ln_gru_sequence -> run_sequence) ----------

SEQ = {"lstm": ("lstm", ref_ln_lstm_sequence), "gru": ("gru", ref_ln_gru_sequence)}


def _spy_backends(monkeypatch, cell, ran):
    """Record which of the cell's ``Backends`` runs: "body" (the operator's body, eager),
    "op" (the registered operator), "reference" (the reference loop), "triton" (the Triton
    kernels: recorded, then the reference loop computes; their math is test_triton.py's)."""
    b = ops_sequence._BACKENDS[cell]

    def native_(eager):
        ran.append("body" if eager else "op")
        return b.native(eager)

    def reference(*args):
        ran.append("reference")
        return b.reference(*args)

    monkeypatch.setitem(ops_sequence._BACKENDS, cell,
                        b._replace(native=native_, reference=reference))

    def triton(cell, xg, states, params, order, batch_sizes, eps, gain_x, bias_x, masks):
        ran.append("triton")
        outs = sequence.with_order(lambda xg_, *s: b.reference(
            xg_, *s, *params, batch_sizes, eps, *(masks.values())), order, xg, tuple(states))
        return outs

    monkeypatch.setattr(kernels, "sequence", triton)


def _seq_args(kind, dtype=torch.float32):
    return [a.detach().to(dtype).requires_grad_() for a in make_args(kind, 4, 3, 5)]


def _ref(kind, args, lengths):
    return SEQ[kind][1](*[a.detach().double() for a in args], lengths=lengths)


def _eager(fn, args, lengths):
    return fn(*args, lengths=lengths), None


def _jvp(fn, args, lengths):
    """Forward-mode AD: the outputs' tangents for the tangent ones(xg)."""
    with fwAD.dual_level():
        outs = fn(fwAD.make_dual(args[0].detach(), torch.ones_like(args[0])),
                  *[a.detach() for a in args[1:]], lengths=lengths)
        return [o.detach() for o in outs], [fwAD.unpack_dual(o).tangent for o in outs]


def _grad(fn, args, lengths):
    """torch.func.grad of sum(out) with respect to xg."""
    rest = [a.detach() for a in args[1:]]

    def loss(xg):
        outs = fn(xg, *rest, lengths=lengths)
        return outs[0].sum(), outs

    g, outs = torch.func.grad(loss, has_aux=True)(args[0].detach())
    return outs, [g]


def _vmap(fn, args, lengths):
    """torch.func.vmap over two copies of xg (dim 3)."""
    xg = args[0].detach()
    rest = [a.detach() for a in args[1:]]
    out = torch.func.vmap(lambda x: fn(x, *rest, lengths=lengths)[0], in_dims=3,
                          out_dims=3)(torch.stack([xg, xg], 3))
    return [out[..., 0], out[..., 1]], None


def _trace(fn, args, lengths):
    rest = [a.detach() for a in args[1:]]
    traced, _ = _quiet(lambda: torch.jit.trace(lambda xg: fn(xg, *rest, lengths=lengths)[0],
                                               (args[0].detach(),), check_trace=False))
    return [traced(args[0].detach())], None


def _subclass(fn, args, lengths):
    return fn(args[0].as_subclass(_Sub), *args[1:], lengths=lengths), None


def _compiled(fn, args, lengths):
    """torch.compile (dynamo's graph run eagerly: no code generated)."""
    return torch.compile(lambda *a: fn(*a, lengths=lengths), backend="eager")(*args), None


def _ref_derivative(kind, args, lengths, run):
    args64 = [a.detach().double() for a in args]
    ref = SEQ[kind][1]
    if run is _jvp:
        return _jvp(ref, args64, lengths)[1]
    if run is _grad:
        return _grad(ref, args64, lengths)[1]
    return None


# condition -> (context, how the call runs)
SEQ_CONDITIONS = {
    "eager": (lambda mp: contextlib.nullcontext(), _eager),
    "USE_NATIVE=False": (lambda mp: mp.context(), _eager),
    "dispatch mode": (lambda mp: _Passthrough(), _eager),
    "autocast bf16": (lambda mp: torch.autocast("cpu", torch.bfloat16), _eager),
    "forward AD": (lambda mp: contextlib.nullcontext(), _jvp),
    "torch.func.grad": (lambda mp: contextlib.nullcontext(), _grad),
    "torch.func.vmap": (lambda mp: contextlib.nullcontext(), _vmap),
    "torch.jit.trace": (lambda mp: contextlib.nullcontext(), _trace),
    "onnx capture": (_onnx_capture, _eager),
    "tensor subclass": (lambda mp: contextlib.nullcontext(), _subclass),
    "torch.compile": (lambda mp: contextlib.nullcontext(), _compiled),
}
# (condition, dtype) -> the implementation that runs, with the C kernels loaded
SEQ_TABLE = [
    ("eager", torch.float32, "body"),
    ("eager", torch.bfloat16, "body"),          # in float32, rounded once
    ("eager", torch.float64, "reference"),
    ("USE_NATIVE=False", torch.float32, "reference"),
    ("dispatch mode", torch.float32, "op"),
    ("autocast bf16", torch.float32, "body"),
    ("forward AD", torch.float32, "reference"),
    ("torch.func.grad", torch.float32, "reference"),
    ("torch.func.vmap", torch.float32, "reference"),
    ("torch.jit.trace", torch.float32, "op"),
    ("onnx capture", torch.float32, "reference"),
    ("tensor subclass", torch.float32, "op"),
    ("torch.compile", torch.float32, "op"),
]


@needs_c
@pytest.mark.parametrize("kind", list(SEQ))
@pytest.mark.parametrize("condition,dtype,expected", SEQ_TABLE,
                         ids=[f"{c}-{str(d)[6:]}" for c, d, _ in SEQ_TABLE])
def test_sequence_operator_choice(kind, condition, dtype, expected, monkeypatch):
    ran = []
    _spy_backends(monkeypatch, SEQ[kind][0], ran)
    if condition == "USE_NATIVE=False":
        monkeypatch.setattr(native, "USE_NATIVE", False)
    context, run = SEQ_CONDITIONS[condition]
    args = _seq_args(kind, dtype)
    lengths = torch.tensor([4, 2, 3])
    fn = getattr(layernorm.rnn.fused, f"ln_{kind}_sequence")
    with context(monkeypatch):
        outs, derivative = run(fn, args, lengths)
    assert ran and set(ran) == {expected}, (condition, ran)
    out_dtype = torch.bfloat16 if condition == "autocast bf16" else dtype
    want = _ref(kind, args, lengths)
    for got, ref in zip(outs, want if run is not _vmap else [want[0]] * 2):
        assert got.dtype == out_dtype
        _close(got, ref, out_dtype)
    if derivative is not None:
        for got, ref in zip(derivative, _ref_derivative(kind, args, lengths, run)):
            _close(got, ref, dtype)


TRITON_TABLE = [("eager", "triton"), ("forward AD", "reference"),
                ("torch.func.grad", "reference"), ("torch.func.vmap", "reference")]


@pytest.mark.parametrize("kind", list(SEQ))
@pytest.mark.parametrize("condition,expected", TRITON_TABLE)
def test_sequence_operator_choice_where_triton_takes_the_tensors(kind, condition, expected,
                                                                 monkeypatch):
    """As on CUDA with triton installed (the CPU tensors taken as CUDA ones): the Triton
    kernels run eagerly; under torch.func transforms and forward-mode AD (which their
    autograd.Function cannot carry: no tangent, no functorch rule) the reference loop runs."""
    monkeypatch.setattr(kernels, "_INTERPRET_CPU", True)
    monkeypatch.setattr(kernels, "_AVAILABLE", True)
    ran = []
    _spy_backends(monkeypatch, SEQ[kind][0], ran)
    _, run = SEQ_CONDITIONS[condition]
    args = _seq_args(kind)
    lengths = torch.tensor([4, 2, 3])
    outs, derivative = run(getattr(layernorm.rnn.fused, f"ln_{kind}_sequence"), args, lengths)
    assert ran and set(ran) == {expected}, (condition, ran)
    if derivative is not None:
        for got, ref in zip(derivative, _ref_derivative(kind, args, lengths, run)):
            _close(got, ref, torch.float32)


# ---- the stacked modules: norm="none" on packed input (ops.plain_*_direction or torch's op) --

def _spy_stack(monkeypatch, m, ran):
    """Record "plain C" (ops.plain_*_sequence), "torch op" (the module's ``_torch_forward``),
    "loop" (``_loop_direction``)."""
    for module, name in ((ops_lstm, "plain_lstm_sequence"), (ops_gru, "plain_gru_sequence")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _r=real, **k: (ran.append("plain C"),
                                                                   _r(*a, **k))[1])
    for name, said in (("_torch_forward", "torch op"), ("_loop_direction", "loop")):
        real = getattr(type(m), name)
        monkeypatch.setattr(type(m), name, lambda self, *a, _r=real, _s=said, **k: (
            ran.append(_s), _r(self, *a, **k))[1])


PLAIN_TABLE = [  # (condition, bias, dtype, expected)
    ("eager", True, torch.float32, "plain C"),
    ("eager", False, torch.float32, "plain C"),
    ("eager", True, torch.float64, "torch op"),
    ("USE_NATIVE=False", True, torch.float32, "torch op"),
    ("dispatch mode", True, torch.float32, "torch op"),
    ("torch.jit.trace", True, torch.float32, "torch op"),
]


@needs_c
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("condition,bias,dtype,expected", PLAIN_TABLE,
                         ids=[f"{c}-bias={b}-{str(d)[6:]}" for c, b, d, _ in PLAIN_TABLE])
def test_norm_none_packed_choice(mode, condition, bias, dtype, expected, monkeypatch):
    """norm="none" on packed input: the C loop without normalization where it runs (also
    without biases), else torch's own op (a trace records that op, for any length, and says
    nothing about a time loop)."""
    m = getattr(layernorm, mode)(4, 3, norm="none", bias=bias, dtype=dtype)
    seqs = [torch.randn(5, 4, dtype=dtype), torch.randn(3, 4, dtype=dtype),
            torch.randn(4, 4, dtype=dtype)]
    packed = pack_sequence(seqs, enforce_sorted=False)
    ran = []
    _spy_stack(monkeypatch, m, ran)
    if condition == "USE_NATIVE=False":
        monkeypatch.setattr(native, "USE_NATIVE", False)
    if condition == "torch.jit.trace":
        class Data(torch.nn.Module):             # a trace takes tensors: the packed fields in
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, *fields):
                return self.m(PackedSequence(*fields))[0].data
        traced, said = _quiet(lambda: torch.jit.trace(Data(), tuple(packed), check_trace=False))
        assert not said, [str(w.message) for w in said]
        assert ran == ["torch op"]
        seqs = [torch.randn(7, 4), torch.randn(2, 4), torch.randn(6, 4)]   # another length
        packed = pack_sequence(seqs, enforce_sorted=False)
        ran.clear()
        out = PackedSequence(traced(*packed), *packed[1:])
    else:
        with _Passthrough() if condition == "dispatch mode" else contextlib.nullcontext():
            out = m(packed)[0]
        assert ran and set(ran) == {expected}, ran
    padded, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
    for b, s in enumerate(seqs):
        want = ref_recurrent(mode, s, _paper_params(m, mode))[0]
        _close(padded[b, :len(s)], want, dtype)


# ---- one step of a cell (ops.cell's lstm_cell / gru_cell / rnn_cell / torch_cell) -------------

def _spy_cells(monkeypatch, cell, ran):
    """Record "C" (the C step), "step" (the reference step in few torch ops), "torch cell"
    (torch's cell op), "readable" (the cell's readable terms and step)."""
    def spy(owner, name, said):
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, **k: (ran.append(said), real(*a, **k))[1])

    spy(ops_cell, "lstm_step", "C")
    spy(ops_cell, "gru_step", "C")
    for name in ("ln_lstm_step", "ln_gru_step", "ln_gru_step_parts", "ln_rnn_step"):
        spy(recurrence, name, "step")
    cells = dict(ops_cell._TORCH_CELLS)
    for key, real in cells.items():
        cells[key] = lambda *a, _r=real: (ran.append("torch cell"), _r(*a))[1]
    monkeypatch.setattr(ops_cell, "_TORCH_CELLS", cells)
    real = type(cell)._readable_step
    monkeypatch.setattr(type(cell), "_readable_step", lambda self, *a, **k: (
        ran.append("readable"), real(self, *a, **k))[1])


def _ref_cell(cell, x, state):
    """The float64 reference step of ``cell`` (tests/reference.py), row by row."""
    p = {"W_x": cell.weight_ih, "W_h": cell.weight_hh}
    if cell.bias:
        p.update(b_x=cell.bias_ih, b_h=cell.bias_hh)
    if cell.norm == "layer":
        if cell.mode == "RNN":
            p.update(g=cell.gain)
        else:
            p.update(g_x=cell.gain_ih, g_h=cell.gain_hh)
        if cell.mode == "LSTM":
            p.update(g_c=cell.gain_c, b_c=getattr(cell, "bias_c", None))
    p = {k: v.detach().double() for k, v in p.items() if v is not None}
    x, state = x.double(), [s.double() for s in state]
    rows = []
    for b in range(x.shape[0]):
        if cell.mode == "LSTM":
            rows.append(ref_lstm_step(x[b], state[0][b], state[1][b], p, cell.eps)[0])
        elif cell.mode == "GRU":
            rows.append(ref_gru_step(x[b], state[0][b], p, cell.eps))
        else:
            rows.append(ref_rnn_step(x[b], state[0][b], p, cell.nonlinearity, cell.eps))
    return torch.stack(rows)


def _h(out):
    return out[0] if isinstance(out, tuple) else out


CELL_CONDITIONS = {
    "eager": contextlib.nullcontext, "dispatch mode": _Passthrough,
    "autocast bf16": lambda: torch.autocast("cpu", torch.bfloat16),
    "no_grad": torch.no_grad,
}
# (condition, dtype, B, bias) -> the implementation, for the LN-LSTM / LN-GRU cells (the
# LN-RNN cell: "step" where these say "C"; norm="none": "torch cell")
CELL_TABLE = [
    ("eager", torch.float32, 3, True, "C"),
    ("no_grad", torch.float32, 3, True, "C"),
    ("eager", torch.float32, 3, False, "step"),
    ("eager", torch.float64, 3, True, "step"),
    ("eager", torch.float16, 3, True, "C*"),          # C where the CPU has no native half GEMM
    ("eager", torch.bfloat16, 3, True, "C*"),
    ("eager", torch.float16, 1, True, "step"),        # one row: the half-type torch ops
    ("USE_NATIVE=False", torch.float32, 3, True, "step"),
    ("dispatch mode", torch.float32, 3, True, "step"),
    ("autocast bf16", torch.float32, 3, True, "readable"),
    ("forward AD", torch.float32, 3, True, "step"),
    ("torch.func.grad", torch.float32, 3, True, "step"),
    ("torch.jit.trace", torch.float32, 3, True, "step"),
    ("onnx capture", torch.float32, 3, True, "step"),
]


@needs_c
@pytest.mark.parametrize("cls,norm", [(layernorm.LSTMCell, "layer"), (layernorm.GRUCell, "layer"),
                                      (layernorm.RNNCell, "layer"), (layernorm.LSTMCell, "none"),
                                      (layernorm.GRUCell, "none")],
                         ids=["LSTM", "GRU", "RNN", "LSTM-none", "GRU-none"])
@pytest.mark.parametrize("condition,dtype,B,bias,expected", CELL_TABLE,
                         ids=[f"{c}-{str(d)[6:]}-B{b}-bias={bi}" for c, d, b, bi, _ in CELL_TABLE])
def test_cell_step_choice(cls, norm, condition, dtype, B, bias, expected, monkeypatch):
    cell = cls(4, 5, norm=norm, bias=bias, dtype=dtype)
    if expected == "C*":
        expected = "step" if native.half_gemm_native(dtype) else "C"
    if expected == "C" and cell.mode == "RNN":
        expected = "step"
    if norm == "none":        # torch's own cell op, under autocast too (as torch.nn's cells)
        expected = "torch cell"
    ran = []
    _spy_cells(monkeypatch, cell, ran)
    x = torch.randn(B, 4, dtype=dtype)
    state = [0.5 * torch.randn(B, 5, dtype=dtype) for _ in range(2 if cell.mode == "LSTM" else 1)]
    hx = tuple(state) if cell.mode == "LSTM" else state[0]
    derivative = None
    if condition == "USE_NATIVE=False":
        monkeypatch.setattr(native, "USE_NATIVE", False)
    if condition == "forward AD":
        with fwAD.dual_level():
            out = cell(fwAD.make_dual(x, torch.ones_like(x)), hx)
            derivative = fwAD.unpack_dual(_h(out)).tangent
        want_d = torch.func.jvp(lambda t: _ref_cell(cell, t, state), (x.double(),),
                                (torch.ones_like(x.double()),))[1]
    elif condition == "torch.func.grad":
        derivative, out = torch.func.grad(lambda t: (_h(o := cell(t, hx)).sum(), o),
                                          has_aux=True)(x)
        want_d = torch.func.grad(lambda t: _ref_cell(cell, t, state).sum())(x.double())
    elif condition == "torch.jit.trace":
        traced, _ = _quiet(lambda: torch.jit.trace(cell, (x, hx), check_trace=False))
        out = traced(x, hx)
    elif condition == "onnx capture":
        with _onnx_capture(monkeypatch):
            out = cell(x, hx)
    else:
        with CELL_CONDITIONS.get(condition, contextlib.nullcontext)():
            out = cell(x, hx)
    assert ran and set(ran) == {expected}, ran
    if condition == "autocast bf16":   # (the dtype as torch's cell's: test_cells_step.py)
        dtype = torch.bfloat16
    else:
        assert _h(out).dtype == dtype
    _close(_h(out), _ref_cell(cell, x, state), dtype)
    if derivative is not None:
        _close(derivative, want_d, dtype)


# ---- the stacked modules, norm="layer" / "batch": which operator runs one layer and direction --

def _spy_layers(monkeypatch, m, ran):
    """As ``_spy_stack``, and "inference" (the inference kernels), the LN operators' "body" /
    "op" / "reference" (``_spy_backends``), "bn C" (the BN operators' C loop), "step" (one
    step, T = 1, through the cells' entries)."""
    _spy_stack(monkeypatch, m, ran)
    _spy_backends(monkeypatch, m.mode.lower(), ran)
    real = inference._inference
    monkeypatch.setattr(inference, "_inference", lambda *a, **k: (ran.append("inference"),
                                                                   real(*a, **k))[1])
    for cls in (ops_bn._BNLSTM, ops_bn._BNGRU):
        monkeypatch.setattr(cls, "apply", classmethod(
            lambda c, *a, _r=cls.apply: (ran.append("bn C"), _r(*a))[1]))
    for name in ("lstm_cell", "gru_cell"):
        real_cell = getattr(ops_cell, name)
        monkeypatch.setattr(layernorm.ops, name, lambda *a, _r=real_cell: (
            ran.append("step"), _r(*a))[1])


STACK_TABLE = [  # (condition, dtype, T, LN's path, BN's path), inputs of 3 examples
    ("train", torch.float32, 4, "body", "bn C"),
    ("no_grad", torch.float32, 4, "inference", "bn C"),
    ("no_grad", torch.bfloat16, 4, "inference*", "loop"),
    ("train", torch.float64, 4, "reference", "loop"),
    ("train", torch.float32, 1, "step", "bn C"),
    ("USE_NATIVE=False", torch.float32, 4, "reference", "loop"),
    ("autocast bf16", torch.float32, 4, "body", "loop"),
    ("dispatch mode", torch.float32, 4, "op", "loop"),
    ("forward AD", torch.float32, 4, "reference", "loop"),
    ("torch.func.grad", torch.float32, 4, "reference", "loop"),
    ("onnx capture", torch.float32, 4, "reference", "loop"),
    ("torch.jit.trace", torch.float32, 4, "loop", "loop"),
]


@needs_c
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("norm", ["layer", "batch"])
@pytest.mark.parametrize("condition,dtype,T,ln,bn", STACK_TABLE,
                         ids=[f"{c}-{str(d)[6:]}-T{t}" for c, d, t, _, _ in STACK_TABLE])
def test_stack_layer_choice(mode, norm, condition, dtype, T, ln, bn, monkeypatch):
    """Which operator runs the layer, and (norm="layer") the float64 reference's outputs and
    derivatives there (norm="batch": the float64 module's readable loop in training mode)."""
    m = _randomize(getattr(layernorm, mode)(4, 5, norm=norm, dtype=dtype))
    if norm == "batch" and condition in ("torch.func.grad", "torch.jit.trace"):
        m.eval()       # (training updates the running statistics in place: neither takes it)
    expected = ln if norm == "layer" else bn
    if expected == "inference*":                 # bfloat16 products where the CPU has them
        expected = "inference" if native.load().bf16_dot() else "body"
    if condition == "USE_NATIVE=False":
        monkeypatch.setattr(native, "USE_NATIVE", False)
    x = torch.randn(T, 3, 4, dtype=dtype)
    ran = []
    _spy_layers(monkeypatch, m, ran)
    derivative = None
    if condition == "forward AD":
        with fwAD.dual_level():
            out = m(fwAD.make_dual(x, torch.ones_like(x)))[0]
            derivative = fwAD.unpack_dual(out).tangent
    elif condition == "torch.func.grad":
        derivative, out = torch.func.grad(lambda t: ((o := m(t)[0]).sum(), o), has_aux=True)(x)
    elif condition == "torch.jit.trace":
        traced, _ = _quiet(lambda: torch.jit.trace(m, (x,), check_trace=False))
        out = traced(x)[0]
    elif condition == "onnx capture":
        with _onnx_capture(monkeypatch):
            out = m(x)[0]
    else:
        context = {"no_grad": torch.no_grad, "dispatch mode": _Passthrough,
                   "autocast bf16": lambda: torch.autocast("cpu", torch.bfloat16)}.get(
            condition, contextlib.nullcontext)
        with context():
            out = m(x)[0]
    assert ran and set(ran) == {expected}, ran
    tol_dtype = torch.bfloat16 if condition == "autocast bf16" else dtype
    if norm == "batch":
        m64 = _randomize(getattr(layernorm, mode)(4, 5, norm=norm, dtype=torch.float64))
        m64.load_state_dict(m.state_dict())
        _close(out, m64.train(m.training)(x.double())[0], tol_dtype)
        return
    params = _paper_params(m, mode)
    x64 = x.double()

    def ref(xs):
        return torch.stack([ref_recurrent(mode, xs[:, b], params)[0] for b in range(3)], 1)
    _close(out, ref(x64), tol_dtype)
    if condition == "forward AD":
        _close(derivative, torch.func.jvp(ref, (x64,), (torch.ones_like(x64),))[1], dtype)
    if condition == "torch.func.grad":
        _close(derivative, torch.func.grad(lambda t: ref(t).sum())(x64), dtype)


# ---- the input term's GEMM (ops.gemm.input_linear) -------------------------------------------

def _spy_gemm(monkeypatch, ran):
    """Record "C" (the C kernels' GEMM), "oneDNN" (w packed once, no autograd), "F.linear"."""
    real = gemm._NativeLinear.apply
    monkeypatch.setattr(gemm._NativeLinear, "apply", classmethod(
        lambda c, *a: (ran.append("C"), real(*a))[1]))
    real_pack = gemm._packed_weight
    monkeypatch.setattr(gemm, "_packed_weight", lambda *a: (
        ran.append("oneDNN") if (p := real_pack(*a)) is not None else None, p)[1])
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: (ran.append("F.linear"),
                                                                   real_linear(*a))[1])


GEMM_TABLE = [  # (condition, threads, dtype, expected)
    ("train", 1, torch.float32, "C"),
    ("train", 2, torch.float32, "C"),
    ("no_grad", 2, torch.float32, "C"),
    ("no_grad", 1, torch.float64, "F.linear"),
    ("USE_NATIVE=False", 1, torch.float32, "oneDNN"),
    ("dispatch mode", 1, torch.float32, "F.linear"),
    ("autocast bf16", 1, torch.float32, "F.linear"),
    ("forward AD", 1, torch.float32, "F.linear"),
    ("forward AD", 2, torch.float32, "F.linear"),
    ("torch.func.jvp", 2, torch.float32, "F.linear"),
    ("torch.func.vmap", 2, torch.float32, "F.linear"),
]


@needs_c
@pytest.mark.parametrize("condition,threads,dtype,expected", GEMM_TABLE,
                         ids=[f"{c}-{n}thr-{str(d)[6:]}" for c, n, d, _ in GEMM_TABLE])
def test_input_linear_choice(condition, threads, dtype, expected, monkeypatch):
    """Which GEMM computes the input term, and that it is x @ w.T with its derivatives (the
    packed oneDNN product has none: it runs only where nothing differentiates it)."""
    monkeypatch.setattr(gemm, "_PACKED_MIN_FLOPS", 0)
    if gemm._packed_weight(torch.randn(16, 8), 12) is None and expected == "oneDNN":
        pytest.skip("oneDNN's packed linear is unavailable here")
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)   # (read by input_linear)
    if condition == "USE_NATIVE=False":
        monkeypatch.setattr(native, "USE_NATIVE", False)
    x = torch.randn(4, 3, 8, dtype=dtype)
    width = native.load().panel_width()
    w = torch.randn(2 * width, 8, dtype=dtype, requires_grad=condition == "train")
    t = torch.randn_like(x)
    ran = []
    _spy_gemm(monkeypatch, ran)
    tangent = None
    if condition == "forward AD":
        with fwAD.dual_level():
            y = gemm.input_linear(fwAD.make_dual(x, t), w)
            tangent = fwAD.unpack_dual(y).tangent
    elif condition == "torch.func.jvp":
        y, tangent = torch.func.jvp(lambda v: gemm.input_linear(v, w), (x,), (t,))
    elif condition == "torch.func.vmap":
        y = torch.func.vmap(lambda v: gemm.input_linear(v, w), in_dims=3, out_dims=3)(
            torch.stack([x, x], 3))[..., 1]
    else:
        context = {"no_grad": torch.no_grad, "dispatch mode": _Passthrough,
                   "autocast bf16": lambda: torch.autocast("cpu", torch.bfloat16)}.get(
            condition, contextlib.nullcontext)
        with context():
            y = gemm.input_linear(x, w)
    assert ran and set(ran) == {expected}, ran
    _close(y, x.double() @ w.detach().double().T,
           torch.bfloat16 if condition == "autocast bf16" else dtype)
    if condition in ("forward AD", "torch.func.jvp"):
        assert tangent is not None, "the tangent was dropped"
        _close(tangent, t.double() @ w.detach().double().T, dtype)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_frozen_stack_under_jvp_keeps_the_tangent(mode):
    """A module whose parameters need no gradient, differentiated forward (torch.func.jvp) at a
    size where the input GEMM would take oneDNN's packed product: the tangent is the float64
    module's (the packed product, which has no derivative, is not taken under a transform)."""
    T, B, I, H = 12, 8, 128, 128
    assert T * B * 3 * H * I >= gemm._PACKED_MIN_FLOPS
    m = getattr(layernorm, mode)(I, H).requires_grad_(False)
    m64 = getattr(layernorm, mode)(I, H, dtype=torch.float64).requires_grad_(False)
    m64.load_state_dict(m.state_dict())
    x, t = torch.randn(T, B, I), torch.randn(T, B, I)
    got = torch.func.jvp(lambda v: m(v)[0], (x,), (t,))[1]
    want = torch.func.jvp(lambda v: m64(v)[0], (x.double(),), (t.double(),))[1]
    _close(got, want, torch.float32)


def test_only_the_ln_sequence_operators_ask_for_triton(monkeypatch):
    """As on CUDA without triton: the LN sequence operators say once that their time loop runs
    as torch ops; a cell's step, the BN layers and norm="none" (which have no Triton kernels)
    neither ask nor say it."""
    monkeypatch.setattr(kernels, "_INTERPRET_CPU", True)      # the CPU tensors taken as CUDA's
    monkeypatch.setattr(kernels, "_AVAILABLE", False)
    monkeypatch.setattr(kernels, "_WARNED", False)
    x = torch.randn(3, 2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layernorm.LSTMCell(4, 5)(x[0])
        layernorm.GRUCell(4, 5, norm="none")(x[0])
        layernorm.LSTM(4, 5, norm="batch")(x)
        layernorm.GRU(4, 5, norm="none")(pack_sequence([x[:, 0], x[:2, 1]]))
    said = [str(w.message) for w in caught if "triton" in str(w.message)]
    assert not said, said
    with pytest.warns(RuntimeWarning, match="triton is not installed"):
        layernorm.LSTM(4, 5)(x)
