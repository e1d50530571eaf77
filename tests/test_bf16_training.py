"""bfloat16 training on the CPU (a bfloat16 module, or ``torch.autocast("cpu", torch.bfloat16)``):
the LN-LSTM / LN-GRU operators take the caller's dtype as their ``bf16`` flag, and run their
recurrent products on the CPU's bfloat16 dot products (AVX512-BF16): the forward's W_hh h_{t-1}
(``wpb``) and the backward's dhg_t W_hh (``wtpb``), and dW_hh as bfloat16 GEMMs where torch has
them (``gemm.WeightGrad``), float32 statistics, gates, states and accumulation
(docs/rnnfast.md). Against the float64 module on the same bfloat16 values within 8 eps (outputs)
and 40 eps of the largest value (gradients), padded and packed; the builds without the bfloat16
dot products (AVX2) or without torch's bfloat16 GEMM take the float32 products, also tested. And
the C kernels' GEMM for weight gradients (``WeightGrad``, the native input GEMM's backward) and
the pooled cast of the input term."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import layernorm
from layernorm.ops import common, gemm, native
from tests.test_native_paths import avx2_kernels  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(native.load() is None, reason="no C compiler: no C kernels")
needs_bf16 = pytest.mark.skipif(native.load() is None or not native.load().bf16_dot(),
                                reason="no AVX512-BF16 here: the backward's products are float32")
EPS = torch.finfo(torch.bfloat16).eps
LENS = torch.tensor([9, 3, 9, 1, 5, 7])


def _spy(monkeypatch):
    """The sequence kernels' calls: (kernel, the recurrent weight's field names)."""
    calls, real = [], native.call

    def spy(lib, kernel, cls, who, **fields):
        calls.append((kernel, sorted(k for k in ("wp", "wtp", "wpb", "wtpb")
                                     if fields.get(k) is not None)))
        return real(lib, kernel, cls, who, **fields)
    monkeypatch.setattr(native, "call", spy)
    return calls


def _module(cls, autocast):
    """A 2-layer LN module with LN parameters away from 1 / 0, its weights bfloat16 values; the
    module in bfloat16, or in float32 for autocast."""
    torch.manual_seed(2)
    m = getattr(layernorm, cls)(6, 24, norm="layer", num_layers=2)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.add_(0.1 * torch.randn_like(p))
    m = m.bfloat16()
    return m.float() if autocast else m


def _run(m, x, g, autocast, packed):
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        lens = LENS.repeat(x.shape[1] // len(LENS))
        inp = pack_padded_sequence(x, lens, enforce_sorted=False) if packed else x
        out, state = m(inp)
    out = out.data if packed else out
    state = state[0] if isinstance(state, tuple) else state
    (out.float() * g[:out.shape[0]].float()).sum().backward()
    grads = {name: p.grad for name, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    return out, state, grads


def _assert_within_tolerance(cls, autocast, packed, B=6):
    """Outputs within 8 eps, every gradient within 40 eps of its largest value, of the float64
    module (the half types' tolerance of test_fused at H > 8); B a multiple of 6."""
    m = _module(cls, autocast)
    ref = copy.deepcopy(m).double()
    x = torch.randn(9, B, 6).bfloat16()
    g = torch.randn(9 * B, 24) if packed else torch.randn(9, B, 24)
    out, state, grads = _run(m, x if not autocast else x.float(), g, autocast, packed)
    out64, state64, grads64 = _run(ref, x.double(), g.double(), False, packed)
    # (torch does not cast its GRU on the CPU: a GRU under autocast returns float32, from the
    # same bfloat16 products)
    assert out.dtype == state.dtype == (torch.float32 if autocast and cls == "GRU" else
                                        torch.bfloat16)
    for name, a, b in (("out", out, out64), ("h_n", state, state64)):
        torch.testing.assert_close(a.double(), b, atol=8 * EPS, rtol=8 * EPS, msg=name)
    for name, b in grads64.items():
        a = grads[name]
        assert a.dtype == (torch.float32 if autocast else torch.bfloat16)
        scale = b.abs().max().item()
        torch.testing.assert_close(a.double(), b, atol=40 * EPS * max(scale, 1e-3),
                                   rtol=40 * EPS, msg=f"gradient of {name}")


@needs_bf16
@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("autocast", [False, True], ids=["bf16-module", "autocast"])
def test_bf16_training_within_the_dtypes_tolerance(monkeypatch, cls, packed, autocast):
    """A bfloat16 module (or a float32 one under autocast to bfloat16) trains through the
    operators with the recurrent products in bfloat16 (every forward call gets W_hh in bfloat16
    panels, every backward call W_hh^T), outputs and gradients within the half types' tolerance
    of the float64 module."""
    calls = _spy(monkeypatch)
    _assert_within_tolerance(cls, autocast, packed)
    kernel = cls.lower()
    assert calls.count((f"{kernel}_forward_seq", ["wpb"])) == 2  # two layers
    backward = [c for c in calls if c[0] == f"{kernel}_backward_seq"]
    assert backward and all(fields == ["wtpb"] for _, fields in backward)


@needs_bf16
@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_bf16_training_on_two_threads(cls):
    """Two OpenMP threads' row blocks (B = 24: 12 rows each), each with its own bfloat16 rows of
    dhg_t: the same tolerance, packed."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert native.threads(24) == 2
        _assert_within_tolerance(cls, False, True, B=24)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("without", ["bf16-dot", "bf16-gemm"])
def test_bf16_training_without_the_bf16_products(monkeypatch, request, cls, without):
    """Where the loaded kernels have no bfloat16 dot products (the AVX2 build, as on a CPU
    without AVX512-BF16) both recurrent products are float32 (``wp``, ``wtp``); where torch has
    no native bfloat16 GEMM, dW_hh is a float32 GEMM: either way within the same tolerance."""
    if without == "bf16-dot":
        assert request.getfixturevalue("avx2_kernels").bf16_dot() == 0
    else:
        monkeypatch.setitem(native._HALF_GEMM, torch.bfloat16, False)
    calls = _spy(monkeypatch)
    made = []
    real = gemm.WeightGrad.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self.half)
    monkeypatch.setattr(gemm.WeightGrad, "__init__", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # dW_hh in the C kernels' float32 GEMM where not in bfloat16
    try:
        _assert_within_tolerance(cls, False, True)
    finally:
        torch.set_num_threads(before)
    backward = [f for k, f in calls if k.endswith("backward_seq")]
    forward = [f for k, f in calls if k.endswith("forward_seq")]
    if without == "bf16-dot":
        assert backward and all(f == ["wtp"] for f in backward)
        assert forward == [["wp"], ["wp"]]  # two layers
    else:
        assert made and not any(made)   # float32 through the C kernels' GEMM


def test_backward_refuses_bf16_panels_without_bf16_dot_products(avx2_kernels):
    """The AVX2 build's backward entries refuse W_hh^T in bfloat16 panels with a clear error."""
    for kernel, cls in (("lstm_backward_seq", native.LSTMArgs),
                        ("gru_backward_seq", native.GRUArgs)):
        with pytest.raises(RuntimeError, match="bfloat16 panels"):
            native.call(avx2_kernels, kernel, cls, "test", T=2, wtpb=torch.zeros(8))


@pytest.mark.parametrize("N,K", [(64, 7), (37, 12), (1, 1), (2, 9), (3, 5), (5, 3), (12, 40),
                                 (13, 33)])
@pytest.mark.parametrize("half", [False, True], ids=["f32", "bf16"])
@pytest.mark.parametrize("build", ["native", "avx2"])
@pytest.mark.parametrize("threads", [1, 2])
def test_weight_grad_sums_ranges(monkeypatch, request, N, K, half, build, threads):
    """``WeightGrad``: the sum of d^T h over ranges (one of no rows), through the C kernels'
    GEMM (``gemm_packed_at``: N rows in tiles of 1 to 12 rows, each way of copying a tile, K
    not a whole number of panels: padded; the native and the AVX2 build; one thread, or two
    splitting the panels), or as bfloat16 products (float32 within bfloat16's rounding of each
    range's product and of its inputs)."""
    monkeypatch.setitem(native._HALF_GEMM, torch.bfloat16, True)
    monkeypatch.setattr(gemm, "_WEIGHT_GRAD_ROWS", 8)  # the 33-row range in 5 products
    lib = native.load() if build == "native" else request.getfixturevalue("avx2_kernels")
    ranges = [(torch.randn(m, N), torch.randn(m, K)) for m in (5, 0, 33, 1)]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        grad = gemm.WeightGrad(lib, N, K, ranges[0][0], bf16=half)
        assert grad.half == half
        for d, h in ranges:
            grad.add(d, h)
        got = grad.result()
    finally:
        torch.set_num_threads(before)
    if half:
        ref = sum(d.bfloat16().double().t() @ h.bfloat16().double() for d, h in ranges)
        tol = 4 * EPS * max(1.0, ref.abs().max().item())
    else:
        ref = sum(d.double().t() @ h.double() for d, h in ranges)
        tol = 1e-5 * max(1.0, ref.abs().max().item())
    assert got.shape == (N, K) and got.dtype == torch.float32 and got.is_contiguous()
    torch.testing.assert_close(got.double(), ref, atol=tol, rtol=0)


def test_native_input_gemm_second_order():
    """The native input GEMM's backward (C kernels' GEMM) keeps second order: under
    create_graph it runs torch ops, so a gradient of its gradient matches torch's."""
    x = torch.randn(4, 3, 5, requires_grad=True)
    w = torch.randn(2 * native.load().panel_width(), 5, requires_grad=True)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        y = gemm.input_linear(x, w)
        assert type(y.grad_fn).__name__ == "_NativeLinearBackward"
        g = torch.randn_like(y)
        _, dw = torch.autograd.grad(y, (x, w), g, create_graph=True)
        ours = torch.autograd.grad((dw ** 2).sum(), x)[0]
    finally:
        torch.set_num_threads(before)
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    _, dw64 = torch.autograd.grad(torch.nn.functional.linear(x64, w64), (x64, w64), g.double(),
                                  create_graph=True)
    ref = torch.autograd.grad((dw64 ** 2).sum(), x64)[0]
    torch.testing.assert_close(ours.double(), ref, atol=1e-4 * ref.abs().max().item(), rtol=1e-4)


def test_pooled_cast_values_gradient_and_reuse():
    """``common.cast``: the values of ``.to``, the gradient back in the input's dtype, and the
    buffer reused once the previous result is gone."""
    x = torch.randn(6, 4, 8).bfloat16().requires_grad_()
    y = common.cast(x, torch.float32)
    assert y.dtype == torch.float32 and torch.equal(y, x.float())
    g = torch.randn(6, 4, 8)
    (dx,) = torch.autograd.grad(y, x, g)
    assert dx.dtype == torch.bfloat16 and torch.equal(dx, g.bfloat16())
    ptr = y.data_ptr()
    del y
    assert common.cast(x.detach(), torch.float32).data_ptr() == ptr
    assert common.cast(x, torch.bfloat16) is x  # nothing to convert


@pytest.mark.parametrize("G,K", [(1, 1), (7, 5), (12, 33), (1024, 256)])
def test_bf16_panels_of_the_transpose_from_the_weight(G, K):
    """The backward's W_hh^T in bfloat16 panels, made from W_hh in one copy (and cached with it),
    are the bfloat16 panels of the transposed copy (zeros padding an odd G and the columns)."""
    w = torch.randn(G, K)
    for width in (16, 32):
        torch.testing.assert_close(gemm._panels_bf16(w, width, transposed=True),
                                   gemm._panels_bf16(w.t().contiguous(), width),
                                   atol=0, rtol=0)


@needs_bf16
def test_bf16_training_at_a_users_size_with_two_graphs_alive():
    """A 2-layer bidirectional bfloat16 LN-LSTM of hidden 512 on two packed batches of different
    lengths, both graphs alive before either backward: outputs and gradients within the half
    types' tolerance of the float64 module, batch by batch."""
    torch.manual_seed(5)
    m = layernorm.LSTM(16, 512, norm="layer", num_layers=2, bidirectional=True)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.add_(0.1 * torch.randn_like(p))
    m = m.bfloat16()
    ref = copy.deepcopy(m).double()
    batches = [(torch.randn(6, 3, 16).bfloat16(), torch.tensor([6, 2, 4])),
               (torch.randn(4, 2, 16).bfloat16(), torch.tensor([3, 4]))]
    outs = [m(pack_padded_sequence(x, n, enforce_sorted=False))[0].data for x, n in batches]
    for (x, n), out in zip(batches, outs):      # the first backward with the second graph alive
        out64 = ref(pack_padded_sequence(x.double(), n, enforce_sorted=False))[0].data
        torch.testing.assert_close(out.double(), out64, atol=8 * EPS, rtol=8 * EPS)
        g = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        (out.float() * g).sum().backward()
        (out64 * g.double()).sum().backward()
        for (name, p), p64 in zip(m.named_parameters(), ref.parameters()):
            scale = p64.grad.abs().max().item()
            torch.testing.assert_close(p.grad.double(), p64.grad,
                                       atol=40 * EPS * max(scale, 1e-3), rtol=40 * EPS,
                                       msg=f"gradient of {name}")
            p.grad, p64.grad = None, None


def test_packed_weights_of_freed_tensors_leave_the_cache():
    """A bfloat16 module's weights reach the operators as a fresh float32 copy per call; the
    packed panels cached for those copies (with a copy of W_hh each) leave ``gemm._PACK_CACHE``
    when the copies are freed, while a live weight's panels stay and are reused."""
    m = layernorm.LSTM(6, 24, norm="layer").bfloat16()
    x = torch.randn(5, 3, 6).bfloat16()
    for _ in range(3):
        m(x)[0].float().sum().backward()
    assert all(entry[0]() is not None for entry in gemm._PACK_CACHE.values())
    w = torch.randn(96, 24)
    width = native.load().panel_width()
    first = gemm._panels_bf16(w, width)
    assert gemm._panels_bf16(w, width) is first                   # reused while w lives
    keys = [k for k in gemm._PACK_CACHE if k[0] == id(w)]
    assert keys
    del w
    assert not any(k in gemm._PACK_CACHE for k in keys)
