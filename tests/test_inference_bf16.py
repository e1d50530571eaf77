"""bfloat16 inference on the CPU's bfloat16 dot products (AVX512-BF16, ``-march=native``): the
recurrent and input products of ``ops.inference`` in bfloat16 with float32 accumulation, the
statistics and states in float32 (docs/rnnfast.md); and the build without them (the AVX2 build,
as on a CPU that lacks them), where bfloat16 takes the operator path."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import layernorm
from layernorm.ops import inference, native, sequence
from layernorm.ops.gemm import _panels_bf16
from tests.test_native_paths import avx2_kernels  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(native.load() is None, reason="no C compiler: no C kernels")
needs_bf16 = pytest.mark.skipif(native.load() is None or not native.load().bf16_dot(),
                                reason="no AVX512-BF16 here: bfloat16 takes the operator path")
EPS = torch.finfo(torch.bfloat16).eps


def _spy(monkeypatch):
    calls = []

    def spy(*args, real=inference._inference, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out[0].dtype)
        return out
    monkeypatch.setattr(inference, "_inference", spy)
    return calls


def _gemm(lib, a, w):
    wpb = _panels_bf16(w, lib.panel_width())
    y = torch.empty(a.shape[0], wpb.shape[0] * lib.panel_width())
    status = lib.gemm_packed_bf16(a.shape[0], a.shape[1], a.data_ptr(), wpb.data_ptr(),
                                  wpb.shape[0], y.data_ptr())
    return status, y[:, :w.shape[0]]


@needs_bf16
def test_bf16_gemm_tiles_match_float64_on_rounded_values():
    """Every row count of the tiles (1 .. 12, then several), an odd K and a ragged last panel:
    the products of the bfloat16-rounded values to float32 accumulation."""
    lib = native.load()
    K, N = 37, 3 * lib.panel_width() + 5
    w = torch.randn(N, K)
    for M in (1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 30):
        a = torch.randn(M, K)
        status, y = _gemm(lib, a, w)
        ref = a.bfloat16().double() @ w.bfloat16().double().t()
        assert status == 0
        torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5, msg=f"M={M}")


def _modules(cls, I, H):
    torch.manual_seed(3)
    m = getattr(layernorm, cls)(I, H, norm="layer", num_layers=2).eval()
    with torch.no_grad():  # LN parameters away from 1 / 0
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.add_(0.1 * torch.randn_like(p))
    return m


@needs_bf16
@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("threads,B", [(1, 10), (2, 20), (2, 3)])
def test_bf16_module_inference_within_the_dtypes_tolerance(monkeypatch, cls, threads, B):
    """A bfloat16 module under inference_mode runs the bfloat16 inference kernels (padded and
    packed input, one and two threads: their rows (8 or more a thread), or at B = 3 their
    columns) and returns bfloat16 within today's half-type tolerance (8 eps) of the float64
    module on the same bfloat16 values."""
    calls = _spy(monkeypatch)
    m = _modules(cls, 33, 40).bfloat16()
    ref = copy.deepcopy(m).double()
    x = torch.randn(9, B, 33).bfloat16()
    lens = torch.tensor([9, 3, 9, 1, 5, 9, 2, 7, 8, 4] * 2)[:B]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for inp, inp64 in ((x, x.double()),
                           (pack_padded_sequence(x, lens, enforce_sorted=False),
                            pack_padded_sequence(x.double(), lens, enforce_sorted=False))):
            with torch.inference_mode():
                out, state = m(inp)
                out64, state64 = ref(inp64)
            out, out64 = (o.data if hasattr(o, "data") else o for o in (out, out64))
            states = state if isinstance(state, tuple) else (state,)
            states64 = state64 if isinstance(state64, tuple) else (state64,)
            for a, b in zip((out, *states), (out64, *states64)):
                assert a.dtype == torch.bfloat16
                torch.testing.assert_close(a.double(), b, atol=8 * EPS, rtol=8 * EPS)
    finally:
        torch.set_num_threads(before)
    assert calls == [torch.bfloat16] * 4  # two layers, padded and packed


@needs_bf16
@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_autocast_inference_runs_bf16_products(monkeypatch, cls):
    """A float32 module under ``torch.autocast("cpu", torch.bfloat16)`` without a graph: the
    bfloat16 inference kernels (weights rounded to bfloat16, LN parameters float32), bfloat16
    results within 8 eps of the float64 module with those rounded weights."""
    calls = _spy(monkeypatch)
    m = _modules(cls, 20, 24)
    ref = copy.deepcopy(m).double()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if name.startswith("weight"):
                p.copy_(p.bfloat16().double())
    x = torch.randn(7, 5, 20)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        out, _ = m(x)
    # (torch does not cast its GRU on the CPU: float32 out, from the same bfloat16 products)
    assert out.dtype == (torch.float32 if cls == "GRU" else torch.bfloat16)
    assert calls == [torch.bfloat16] * 2
    out64, _ = ref(x.bfloat16().double())
    torch.testing.assert_close(out.double(), out64, atol=8 * EPS, rtol=8 * EPS)


def test_without_bf16_dot_products_bf16_takes_the_operator_path(avx2_kernels, monkeypatch):
    """The AVX2 build has no bfloat16 dot products: its GEMM entry refuses (-4), the sequence
    kernel refuses bfloat16 panels with a clear error, ``inference_applies`` is False for
    bfloat16, and a bfloat16 module runs the operator path within the dtype's tolerance."""
    lib = avx2_kernels
    assert lib.bf16_dot() == 0
    assert _gemm(lib, torch.randn(3, 4), torch.randn(5, 4))[0] == -4
    x, h = torch.randn(2, 1, 3), torch.zeros(1, 4)
    with pytest.raises(RuntimeError, match="bfloat16 panels"):
        native.call(lib, "lstm_forward_seq", native.LSTMArgs, "test", T=2, B=1, H=4, wp=x,
                    wpb=x, xw=torch.randn(2, 1, 16), h0=h, out=torch.empty(2, 1, 4), h_n=h,
                    c_n=h, gain_h=torch.ones(16), bias_h=torch.zeros(16), gain_c=torch.ones(4),
                    bias_c=torch.zeros(4))
    calls = _spy(monkeypatch)
    m = _modules("LSTM", 6, 8).bfloat16()
    xb = torch.randn(5, 3, 6).bfloat16()
    with torch.inference_mode():
        assert sequence.choose_inference(xb, m.weight_hh_l0) is None
        out, _ = m(xb)
        out64, _ = copy.deepcopy(m).double()(xb.double())
    assert calls == [] and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), out64, atol=8 * EPS, rtol=8 * EPS)
