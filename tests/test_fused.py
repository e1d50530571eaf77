"""The fused whole-sequence LN-LSTM / LN-GRU against the plain autograd step loop of
tests/reference.py: forward and every gradient, with and without (unsorted) lengths."""
import pytest
import torch

from layernorm.ops import common, gemm, native
from layernorm.rnn import fused
from layernorm.rnn.fused import ln_gru_sequence, ln_lstm_sequence
from tests.reference import ref_ln_gru_sequence, ref_ln_lstm_sequence

KINDS = {  # name: (function, reference, gate blocks, number of states, LN_h width in blocks)
    "lstm": (ln_lstm_sequence, ref_ln_lstm_sequence, 4, 2, 4),
    "gru": (ln_gru_sequence, ref_ln_gru_sequence, 3, 1, 2),
}


def make_args(kind, T, B, H, dtype=torch.float32):
    """xg, states, w_hh, gain_h, bias_h, gain_2, bias_2 with non-trivial gains and biases."""
    _, _, G, n_states, n_ln = KINDS[kind]
    args = [torch.randn(T, B, G * H, dtype=dtype)]
    args += [0.5 * torch.randn(B, H, dtype=dtype) for _ in range(n_states)]
    args += [torch.randn(G * H, H, dtype=dtype) / H ** 0.5]
    args += [1 + 0.1 * torch.randn(n_ln * H, dtype=dtype), 0.1 * torch.randn(n_ln * H, dtype=dtype)]
    args += [1 + 0.1 * torch.randn(H, dtype=dtype), 0.1 * torch.randn(H, dtype=dtype)]
    return [a.requires_grad_() for a in args]


def outputs_and_grads(fn, args, lengths, grads_out=None):
    outs = fn(*args, lengths=lengths)
    if grads_out is None:
        grads_out = [torch.randn_like(o) for o in outs]
    grads = torch.autograd.grad(outs, args, [g.to(outs[0].dtype) for g in grads_out])
    return outs, grads, grads_out


LENGTHS = {
    "full": None,
    "unsorted": lambda T, B: torch.tensor([T - 2, T, 1, 0, T, 3] * 2)[:B],
}


def assert_matches_float64(fn, ref, args, lens, tol: float = 1e-5) -> None:
    """``fn``'s outputs and every gradient equal the float64 reference ``ref`` on the same
    inputs (gradients to ``tol`` of their scale)."""
    outs, grads, g_out = outputs_and_grads(fn, args, lens)
    args64 = [a.detach().double().requires_grad_() for a in args]
    outs64, grads64, _ = outputs_and_grads(ref, args64, lens, [g.double() for g in g_out])
    for a, b in zip(outs, outs64):
        torch.testing.assert_close(a.double(), b, atol=tol, rtol=tol)
    for a, b in zip(grads, grads64):
        torch.testing.assert_close(a.double(), b, atol=tol * max(1.0, b.abs().max().item()),
                                   rtol=tol)


@pytest.fixture(params=["native", "torch-ops", "torch-ops-mm"])
def step_path(request, monkeypatch):
    """Run every comparison through each implementation of the step: the C kernel (LSTM, when a
    compiler is available), torch ops with oneDNN's packed GEMM (whatever the size), torch ops
    with torch.mm."""
    if request.param == "native":
        if native.load() is None:
            pytest.skip("no C compiler: the C step kernel is unavailable (torch ops are used)")
    else:
        monkeypatch.setattr(fused, "USE_NATIVE", False)
    if request.param == "torch-ops-mm":
        monkeypatch.setattr(gemm, "_PACKED_OK", False)
    else:
        monkeypatch.setattr(gemm, "_PACKED_MIN_FLOPS", 0)
    return request.param


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("lengths", list(LENGTHS))
# (4, 10, 64): big enough for the C kernels' OpenMP branches (bs >= 8, H >= 64)
@pytest.mark.parametrize("T,B,H", [(6, 6, 7), (3, 1, 16), (9, 4, 32), (4, 10, 64)])
def test_fused_matches_reference_fp32(kind, lengths, T, B, H, step_path):
    fn, ref, *_ = KINDS[kind]
    if LENGTHS[lengths] is not None:
        B = max(B, 6)
    lens = LENGTHS[lengths] and LENGTHS[lengths](T, B)
    args = make_args(kind, T, B, H)
    outs, grads, g_out = outputs_and_grads(fn, args, lens)
    args64 = [a.detach().double().requires_grad_() for a in args]
    outs64, grads64, _ = outputs_and_grads(ref, args64, lens, [g.double() for g in g_out])
    for name, a, b in zip(["out", "h_n", "c_n"], outs, outs64):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5, msg=name)
    # gradients are sums over T * B terms: tolerance 1e-5 relative to the gradient's scale
    for i, (a, b) in enumerate(zip(grads, grads64)):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=1e-5 * scale, rtol=1e-5,
                                   msg=f"gradient of argument {i}")
        assert torch.isfinite(a).all()
    if lens is not None:  # padded steps: output exactly 0
        steps = torch.arange(T).unsqueeze(1)
        assert (outs[0][steps >= lens.unsqueeze(0)] == 0).all()


GROUPS = {"lstm": lambda H: (4 * H,), "gru": lambda H: (2 * H, H)}  # units normalized jointly



@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("lengths", list(LENGTHS))
@pytest.mark.parametrize("T,B,H", [(6, 6, 7), (5, 12, 40)])
def test_fused_input_ln_matches_reference(kind, lengths, T, B, H, step_path):
    """With gain_x / bias_x the input term is the raw W_x x and its LN (per group of units) runs
    inside (in the C kernel's step on the native path): equal to LN outside + the reference,
    every gradient, and the inference path gives the same numbers."""
    fn, ref_fn, G, n_states, _ = KINDS[kind]
    lens = LENGTHS[lengths] and LENGTHS[lengths](T, B)
    xw, *rest = make_args(kind, T, B, H)
    gain_x = (1 + 0.1 * torch.randn(G * H)).requires_grad_()
    bias_x = (0.1 * torch.randn(G * H)).requires_grad_()
    args = [xw, *rest, gain_x, bias_x]
    groups = GROUPS[kind](H)

    def ours(xw, *a, lengths):
        return fn(xw, *a[:-2], lengths=lengths, gain_x=a[-2], bias_x=a[-1])

    def ref(xw, *a, lengths):
        parts = zip(xw.split(groups, -1), a[-2].split(groups), a[-1].split(groups))
        xg = torch.cat([torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5)
                        for x, g, b in parts], -1)
        return ref_fn(xg, *a[:-2], lengths=lengths)

    outs, grads, g_out = outputs_and_grads(ours, args, lens)
    args64 = [a.detach().double().requires_grad_() for a in args]
    outs64, grads64, _ = outputs_and_grads(ref, args64, lens, [g.double() for g in g_out])
    for i, (a, b) in enumerate(zip(outs, outs64)):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5, msg=f"output {i}")
    for i, (a, b) in enumerate(zip(grads, grads64)):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=1e-5 * scale, rtol=1e-5,
                                   msg=f"gradient of argument {i}")
    with torch.no_grad():  # inference path: the same numbers
        for a, b in zip(ours(*args, lengths=lens), outs):
            torch.testing.assert_close(a, b.detach(), atol=0, rtol=0)
    with pytest.raises(ValueError, match="gain_x and bias_x together"):
        fn(*args[:-2], gain_x=gain_x)


@pytest.mark.parametrize("kind", list(KINDS))
def test_fused_buffers_reused_safely(kind):
    """The kernels reuse their saved sequence buffers across calls (common._Workspace) only once
    nothing else holds them: a graph kept with retain_graph while two other forwards run, and a
    broadcast (non-contiguous) output gradient, give the reference's gradients."""
    fn, ref, *_ = KINDS[kind]
    args = make_args(kind, 6, 5, 8)
    xg, *rest = args
    args64 = [a.detach().double().requires_grad_() for a in args]

    def loss(outs):
        return outs[0].sum() + sum((o * o).sum() for o in outs[1:])

    expected = torch.autograd.grad(loss(ref(*args64)), args64)
    first = fn(*args)
    got = torch.autograd.grad(loss(first), args, retain_graph=True)
    second = fn(xg * 0.5, *rest)  # must not take first's buffers
    third = fn(xg * 2, *rest)     # alive together with the second
    torch.autograd.grad(loss(second) + loss(third), args)
    again = torch.autograd.grad(loss(first), args)  # first's saved buffers, read again
    for a, b, e in zip(got, again, expected):
        torch.testing.assert_close(a.double(), e, atol=1e-5 * max(1.0, e.abs().max().item()),
                                   rtol=1e-5)
        assert torch.equal(a, b)
    # and buffers are reused: repeated training steps do not grow the pool
    sizes = []
    for _ in range(3):
        torch.autograd.grad(loss(fn(*args)), args)
        sizes.append(len(common._WORKSPACE._bufs))
    assert sizes[0] == sizes[1] == sizes[2]


def _native_or_skip():
    lib = native.load()
    if lib is None:
        pytest.skip("no C compiler: the C kernels are unavailable (torch ops are used)")
    return lib


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (5, 7, 33), (13, 64, 80), (25, 256, 1024),
                                   (32, 1024, 256), (1, 9, 200), (2, 3, 40), (3, 17, 24),
                                   (4, 128, 512), (4, 5, 72), (7, 9, 56), (8, 512, 128)])
def test_native_gemm_matches_torch(M, K, N):
    """The C kernel's own recurrent GEMM (register tiles over panels of the packed weight): odd
    row counts (partial tiles), N not a multiple of the panel width (zero-padded panels); a few
    rows take wider tiles, so N also leaves a narrower tile at the end of a row."""
    lib = _native_or_skip()
    a, w = torch.randn(M, K), torch.randn(N, K)
    panels = gemm._panels(w, lib.panel_width())
    y = torch.full((M, panels.shape[0] * lib.panel_width()), float("nan"))
    lib.gemm_packed(M, K, a.data_ptr(), panels.data_ptr(), panels.shape[0], y.data_ptr(),
                    torch.get_num_threads())
    torch.testing.assert_close(y[:, :N], a @ w.t(), atol=1e-4 * K ** 0.5, rtol=1e-5)
    assert (y[:, N:] == 0).all()  # padded columns: zero weights


@pytest.mark.parametrize("M,K,N", [(37, 19, 200), (5, 64, 96), (64, 33, 40), (1, 7, 16),
                                   (200, 33, 40), (301, 19, 70), (37, 1024, 40)])
@pytest.mark.parametrize("transposed", [False, True], ids=["a", "a^T"])
def test_native_gemm_threads_split_panels_to_the_same_bits(M, K, N, transposed):
    """``gemm_packed`` / ``gemm_packed_at`` on 1 to 5 threads (more threads than panels
    included): each thread computes a share of the column panels (or, for ``gemm_packed_at``
    with 4 tiles of rows a thread or more, of the rows: 200 and 301 rows) with the one-thread
    sums, so every thread count gives the same bits, and they match torch."""
    lib = _native_or_skip()
    w = torch.randn(N, K)
    a = torch.randn(K, M) if transposed else torch.randn(M, K)
    panels = gemm._panels(w, lib.panel_width())
    h = w.t().contiguous()  # gemm_packed_at packs h (K, N) itself, into buf
    buf = torch.empty_like(panels)
    results = []
    for threads in (1, 2, 3, 5):
        y = torch.full((M, panels.shape[0] * lib.panel_width()), float("nan"))
        if transposed:
            status = lib.gemm_packed_at(M, K, a.data_ptr(), h.data_ptr(), N, N,
                                        buf.data_ptr(), y.data_ptr(), threads, 0, 0)
        else:
            status = lib.gemm_packed(M, K, a.data_ptr(), panels.data_ptr(), panels.shape[0],
                                     y.data_ptr(), threads)
        assert not status
        results.append(y)
    for y in results[1:]:
        assert torch.equal(y, results[0])
    ref = (a.t() if transposed else a) @ w.t()
    torch.testing.assert_close(results[0][:, :N], ref, atol=1e-4 * K ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_native_weight_gradient_adds_range_by_range(threads):
    """``gemm_packed_at`` with add: dW += d^T h of each range of rows, the sums continuing from
    dW's values: ranges of 300 and 1 and 0 rows (K = 0 leaves dW as it was) give torch's d^T h of
    all rows, the same bits on any number of threads, and the same bits as the ranges' rows in
    one product (each sum runs over the rows in order either way), whether the call packs h in
    ranges of 7 rows, of 64 (h's rows read with a row stride wider than the row), or all at
    once."""
    lib = _native_or_skip()
    torch.manual_seed(0)
    d, wide = torch.randn(301, 200), torch.randn(301, 96)
    h = wide[:, 10:80]  # (301, 70), row stride 96
    width = lib.panel_width()

    def summed(ranges, n, rows=0):
        acc = torch.full((200, -(-70 // width) * width), 0.0)
        buf = torch.empty(301 * acc.shape[1])  # h^T's panels of a range
        for lo, hi in ranges:
            dr = d[lo:hi].contiguous()
            hr = h[lo:hi] if hi > lo else h[:1]
            assert not lib.gemm_packed_at(200, hi - lo, dr.data_ptr(), hr.data_ptr(),
                                          hr.stride(0), 70, buf.data_ptr(), acc.data_ptr(), n, 1,
                                          rows)
        assert (acc[:, 70:] == 0).all()  # padded columns: zero rows of h^T
        return acc[:, :70]
    ranges = summed([(0, 300), (300, 301), (301, 301)], threads)
    assert torch.equal(ranges, summed([(0, 301)], 1))
    for rows in (7, 64):
        assert torch.equal(ranges, summed([(0, 300), (300, 301)], threads, rows))
    torch.testing.assert_close(ranges, d.t() @ h, atol=1e-4 * 301 ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("K,N", [(700, 600), (513, 40), (1030, 96), (1024, 40), (2048, 72),
                                 (1024, 600), (1000, 40), (3072, 8), (256, 1024)])
@pytest.mark.parametrize("kind", ["float32", "bfloat16"])
def test_native_gemm_cache_blocks_keep_each_rows_bits(K, N, kind):
    """The C GEMM in cache blocks (blocks of k, and of panels where several tiles of rows share
    them): a row's result has the same bits in a product of 50 rows (blocks of panels, sums
    continued across blocks of k) as alone (one tile), so the inference kernels' step-by-step
    products equal the training path's whole-sequence one; and it matches torch. K 1024, 2048
    and 3072: rows 4 KB apart (float32; bfloat16 at 2048), which run tiles of at most 6 rows;
    a long K over a few panels (1000 x 40, 1024 x 40) runs in one block of k."""
    lib = _native_or_skip()
    if kind == "bfloat16" and not lib.bf16_dot():
        pytest.skip("the kernels have no bfloat16 dot products on this CPU")
    a, w = torch.randn(50, K), torch.randn(N, K)
    width = lib.panel_width()
    if kind == "float32":
        panels = gemm._panels(w, width)
        run = lambda rows, y: lib.gemm_packed(  # noqa: E731
            rows.shape[0], K, rows.data_ptr(), panels.data_ptr(), panels.shape[0], y.data_ptr(),
            1)
        ref, atol = a @ w.t(), 1e-4 * K ** 0.5
    else:
        panels = gemm._panels_bf16(w, width)
        run = lambda rows, y: lib.gemm_packed_bf16(  # noqa: E731
            rows.shape[0], K, rows.data_ptr(), panels.data_ptr(), panels.shape[0], y.data_ptr())
        ref, atol = a.bfloat16().float() @ w.bfloat16().float().t(), 1e-3 * K ** 0.5
    y = torch.full((50, panels.shape[0] * width), float("nan"))
    run(a, y)
    for r in (0, 17, 49):
        alone = torch.full((1, y.shape[1]), float("nan"))
        run(a[r:r + 1].contiguous(), alone)
        assert torch.equal(alone[0], y[r]), r
    torch.testing.assert_close(y[:, :N], ref, atol=atol, rtol=1e-5)


@pytest.mark.parametrize("T,B,K,N", [(200, 8, 64, 512), (3, 1, 5, 16), (2, 3, 7, 12), (1, 1, 1, 4)])
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_input_linear_matches_float64(T, B, K, N, x_grad, threads):
    """The input term through the C kernels' GEMM on torch's threads (N a whole number of
    panels; else torch's): forward and the gradients of x and w against float64."""
    lib = _native_or_skip()
    x = torch.randn(T, B, K).requires_grad_(x_grad)
    w = torch.randn(N, K, requires_grad=True)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        y = fused.input_linear(x, w)
        native = type(y.grad_fn).__name__ == "_NativeLinearBackward"
        assert native == (N % lib.panel_width() == 0)
        g = torch.randn_like(y)
        grads = torch.autograd.grad(y, [x, w] if x_grad else [w], g)
    finally:
        torch.set_num_threads(before)
    x64, w64 = x.detach().double().requires_grad_(x_grad), w.detach().double().requires_grad_()
    y64 = torch.nn.functional.linear(x64, w64)
    grads64 = torch.autograd.grad(y64, [x64, w64] if x_grad else [w64], g.double())
    torch.testing.assert_close(y.double(), y64, atol=1e-5 * K ** 0.5, rtol=1e-5)
    for a, b in zip(grads, grads64):
        torch.testing.assert_close(a.double(), b, atol=1e-5 * (T * B * N) ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("G,K", [(1, 1), (3, 12), (40, 24), (512, 128)])
def test_panels_of_the_transpose_from_the_weight(G, K):
    """The backward's W_hh^T panels made from W_hh itself (and cached with it) are the panels
    of the transposed copy, zero columns padding K."""
    w = torch.randn(G, K)
    for width in (4, 8, 16, 32):
        torch.testing.assert_close(gemm._panels(w, width, transposed=True),
                                   gemm._panels(w.t().contiguous(), width), rtol=0, atol=0)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("T,B,H", [(5, 3, 3), (2, 1, 1)])
def test_fused_eager_call_equals_the_registered_operator(kind, T, B, H, monkeypatch):
    """In eager mode the operators' bodies run without torch's dispatcher, with the operators'
    autograd: the same outputs and gradients (first and second order) as the registered
    operators, which fake tensors (torch.compile / export) still reach."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _native_or_skip()
    fn = KINDS[kind][0]
    args = make_args(kind, T, B, H)
    lens = torch.tensor([T, 1, T - 1][:B])
    results, seen, real = [], [], native.where
    for eager in (True, False):
        monkeypatch.setattr(native, "where", (lambda *a, **k: seen.append(real(*a, **k))
                                                or seen[-1])
                            if eager else (lambda *a, **k: real(*a, **k)._replace(eager=False)))
        outs = fn(*args, lengths=lens)
        grads = torch.autograd.grad(outs[0].square().sum(), args, create_graph=True)
        second = torch.autograd.grad(sum(g.sum() for g in grads), args[0])
        results.append([*outs, *grads, *second])
    assert seen and all(w.eager for w in seen)  # the forward and first-order backward ran eagerly
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    monkeypatch.undo()
    mode = FakeTensorMode()
    fake = [mode.from_tensor(a.detach()).requires_grad_() for a in args]
    with mode:
        outs = fn(*fake)
        torch.autograd.grad(outs[0].sum(), fake)
    assert [o.shape for o in outs] == [r.shape for r in results[0][:len(outs)]]


@pytest.mark.parametrize("kind", list(KINDS))
def test_native_same_result_with_any_thread_count(kind):
    """The C forward kernel splits the examples over threads; each example's arithmetic is the
    same whatever the split, so 1 and 2 threads give identical outputs (gradients sum over
    examples in a thread-dependent order: equal to rounding)."""
    _native_or_skip()
    fn, _, _, n_states, _ = KINDS[kind]
    args = make_args(kind, 5, 12, 16)
    lens = torch.tensor([5, 3, 5, 1, 0, 4, 5, 2, 2, 5, 1, 3])
    before = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            torch.set_num_threads(n)
            outs = fn(*args, lengths=lens)
            results.append([*outs, *torch.autograd.grad(outs[0].sum(), args)])
    finally:
        torch.set_num_threads(before)
    k = 1 + n_states
    for a, b in zip(results[0][:k], results[1][:k]):
        assert torch.equal(a, b)
    for a, b in zip(results[0][k:], results[1][k:]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("lengths", [None, [9, 4, 9, 1, 0, 7]])
@pytest.mark.parametrize("masks", [False, True], ids=["", "dropout-zoneout"])
def test_native_backward_in_one_call_equals_ranges(kind, lengths, masks, monkeypatch):
    """A small sequence's backward runs all steps in one kernel call (``ONE_CALL_BYTES``), a long
    one in ranges of steps: the same gradients bit for bit (each step's sums are the same, and
    dW_hh is summed in the same ranges either way), with input LN, lengths and the recurrent
    regularizers' masks."""
    _native_or_skip()
    fn, _, G, _, _ = KINDS[kind]
    T, B, H = 9, 6, 8
    torch.manual_seed(0)
    args = make_args(kind, T, B, H) + list(_input_ln_args(kind, T, B, H, torch.float32))
    lens = None if lengths is None else torch.tensor(lengths)
    extra = {}
    if masks:
        extra["h_mask"] = (torch.rand(B, H) > 0.3).float() / 0.7
        extra["zone_h"] = (torch.rand(T, B, H) > 0.5).float()
        if kind == "lstm":
            extra["zone_c"] = (torch.rand(T, B, H) > 0.5).float()
    results, calls, real = [], [], native.call

    def spy(lib, kernel, cls, who, **fields):
        calls[-1] += kernel.endswith("backward_seq")
        return real(lib, kernel, cls, who, **fields)
    monkeypatch.setattr(native, "call", spy)
    for one_call in (True, False):
        monkeypatch.setattr(common, "ONE_CALL_BYTES", (1 << 30) if one_call else 0)
        calls.append(0)
        outs = fn(*args[:-2], lengths=lens, gain_x=args[-2], bias_x=args[-1], **extra)
        g_out = [torch.linspace(-1, 1, o.numel()).view_as(o) for o in outs]
        results.append([*outs, *torch.autograd.grad(outs, args, g_out)])
    assert calls == [1, 3]  # (the ranges: ceil(T / 4) = 3 steps each)
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("threads,B,H", [(2, 3, 40), (3, 1, 72), (2, 6, 64), (3, 2, 8),
                                         (2, 4, 512)])
@pytest.mark.parametrize("extra", ["", "lengths", "dropout", "zoneout", "bfloat16"])
def test_training_kernels_split_columns_or_rows_alike(kind, threads, B, H, extra, monkeypatch):
    """The sequence kernels' threads split each step's products by columns (``common.SPLIT`` 1:
    each thread its panels of W_hh h_{t-1} and of dhg_t W_hh for every row, meeting twice a step)
    or by rows (2): outputs, final states and the gradients of the input term, the states and
    W_hh the same bits, the LN parameters' gradients (summed over each thread's rows) within float
    rounding, and both match the float64 reference; with lengths, recurrent dropout (the forward
    then splits rows), zoneout (a direct gradient to h_{t-1}), fewer rows than threads, H not a
    whole number of panels (40, 72), fewer panels than threads (8: the rows' split) and a
    users' hidden size (512); in bfloat16 (the products on the bfloat16 panels where the CPU
    has them) the two splits alike."""
    _native_or_skip()
    fn, ref, G, _, _ = KINDS[kind]
    T = 7
    torch.manual_seed(0)
    args = make_args(kind, T, B, H)
    if extra == "bfloat16":
        args = [a.detach().bfloat16().requires_grad_() for a in args]
    lens = torch.tensor([T] + [max(0, T - 2 - b) for b in range(1, B)]) if extra == "lengths" \
        else None
    masks = {}
    if extra == "dropout":
        masks["h_mask"] = (torch.rand(B, H) > 0.3).float() / 0.7
    if extra == "zoneout":
        masks["zone_h"] = (torch.rand(T, B, H) > 0.5).float()
        if kind == "lstm":
            masks["zone_c"] = (torch.rand(T, B, H) > 0.5).float()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    results = []
    try:
        for split in (1, 2):
            monkeypatch.setattr(common, "SPLIT", split)
            outs = fn(*args, lengths=lens, **masks)
            g_out = [torch.linspace(-1, 1, o.numel()).view_as(o).to(o.dtype) for o in outs]
            results.append([*outs, *torch.autograd.grad(outs, args, g_out)])
    finally:
        torch.set_num_threads(before)
    n_ln = 4  # the last four arguments: the LN gains and biases
    for i, (a, b) in enumerate(zip(*results)):
        if i < len(results[0]) - n_ln:
            assert torch.equal(a, b), i
        else:
            torch.testing.assert_close(a, b, atol=1e-5 * max(1.0, b.abs().max().item()), rtol=0)
    if extra == "bfloat16":
        return  # (against float64 within bfloat16's rounding: test_bf16_training)
    args64 = [a.detach().double().requires_grad_() for a in args]
    masks64 = {k: v.double() for k, v in masks.items()}
    # (float64 runs the readable loop, itself checked against tests.reference without masks)
    outs64 = (fn if masks else ref)(*args64, lengths=lens, **masks64)
    grads64 = torch.autograd.grad(outs64, args64, [torch.linspace(-1, 1, o.numel()).view_as(o)
                                                   .double() for o in outs64])
    for a, b in zip(results[0], [*outs64, *grads64]):
        torch.testing.assert_close(a.double(), b, atol=3e-5 * max(1.0, b.abs().max().item()),
                                   rtol=1e-4)


@pytest.mark.parametrize("kind", list(KINDS))
def test_fused_no_grad_path_equals_autograd_path(kind):
    fn = KINDS[kind][0]
    args = make_args(kind, 5, 6, 8)
    lens = torch.tensor([5, 2, 0, 4, 5, 1])
    with_grad = fn(*args, lengths=lens)
    with torch.no_grad():
        without = fn(*args, lengths=lens)
    for a, b in zip(with_grad, without):
        assert not b.requires_grad
        torch.testing.assert_close(a.detach(), b, atol=0, rtol=0)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("lengths", [None, torch.tensor([2, 4, 0, 3])])
def test_fused_gradcheck_float64(kind, lengths):
    fn = KINDS[kind][0]
    args = make_args(kind, 4, 4, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda *a: fn(*a, lengths=lengths), args, eps=1e-6,
                                    atol=1e-6, rtol=1e-5, fast_mode=True)


def test_fused_lengths_equal_running_each_example_alone():
    """An example's result never depends on padding or on the other examples (per-example LN)."""
    args = make_args("lstm", 7, 3, 5)
    lens = torch.tensor([4, 7, 2])
    out, h_n, c_n = ln_lstm_sequence(*args, lengths=lens)
    xg, h0, c0, *params = args
    for b, n in enumerate(lens.tolist()):
        o1, h1, c1 = ln_lstm_sequence(xg[:n, b:b + 1], h0[b:b + 1], c0[b:b + 1], *params)
        torch.testing.assert_close(out[:n, b:b + 1], o1)
        torch.testing.assert_close(h_n[b], h1[0])
        torch.testing.assert_close(c_n[b], c1[0])


def test_fused_rejects_bad_shapes_with_a_fix():
    xg, h0, c0, w, gh, bh, gc, bc = make_args("lstm", 3, 2, 4)
    with pytest.raises(ValueError, match=r"h0 of shape \(B, H\) = \(2, 4\)"):
        ln_lstm_sequence(xg, h0[:1], c0, w, gh, bh, gc, bc)
    with pytest.raises(ValueError, match=r"w_hh of shape \(16, 4\)"):
        ln_lstm_sequence(xg, h0, c0, w.t(), gh, bh, gc, bc)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        ln_lstm_sequence(xg, h0, c0, w, gh, bh, gc, bc, lengths=torch.tensor([4, 1]))
    with pytest.raises(ValueError, match=r"one dtype"):
        ln_lstm_sequence(xg.double(), h0, c0, w, gh, bh, gc, bc)
    with pytest.raises(ValueError, match="at least one time step"):
        ln_lstm_sequence(xg[:0], h0, c0, w, gh, bh, gc, bc)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_modules_fused_path_equals_readable_loop(cls, packed):
    """layernorm.LSTM/GRU(norm="layer") run the fused kernel by default; ``use_fused = False``
    runs the readable loop. The fused float32 module matches the loop run in float64: outputs and
    every parameter gradient (2 layers, bidirectional, variable lengths)."""
    import copy

    import layernorm
    from torch.nn.utils.rnn import pack_padded_sequence

    module = getattr(layernorm, cls)(5, 8, num_layers=2, bidirectional=True, norm="layer")
    with torch.no_grad():  # non-trivial gains and biases
        for name, p in module.named_parameters():
            if name.startswith(("gain", "bias")):
                p.add_(0.1 * torch.randn_like(p))
    reference = copy.deepcopy(module).double()
    reference.use_fused = False
    x = torch.randn(6, 4, 5)
    lengths = torch.tensor([6, 2, 5, 3])

    def run(m, x):
        inp = pack_padded_sequence(x, lengths, enforce_sorted=False) if packed else x
        out, state = m(inp)
        out = out.data if packed else out
        states = state if isinstance(state, tuple) else (state,)
        weights = torch.linspace(-1, 1, out.numel(), dtype=x.dtype).view_as(out)
        loss = (out * weights).sum() + sum((s * s).sum() for s in states)
        return (out, *states), torch.autograd.grad(loss, list(m.parameters()))

    assert module.use_fused
    (outs, grads), (outs64, grads64) = run(module, x), run(reference, x.double())
    for a, b in zip(outs, outs64):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)
    # Gradients of a 2-layer bidirectional stack sum over layers, directions and steps: the
    # readable loop in float32 itself is off by up to ~1e-5 of the gradient's scale here.
    for (name, _), a, b in zip(module.named_parameters(), grads, grads64):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=3e-5 * scale, rtol=1e-5, msg=name)


def test_native_kernel_builds_or_falls_back(tmp_path, monkeypatch):
    """The C kernels compile on first use into the cache (the compile time is reported by
    ``layernorm bench rnn``), later loads reuse it, and with no working compiler ``load()``
    returns None and the LSTM still runs (torch ops)."""

    monkeypatch.setattr(native._LIBRARY, "tried", False)
    monkeypatch.setattr(native._LIBRARY, "lib", None)
    monkeypatch.setenv("LAYERNORM_CACHE", str(tmp_path / "cache"))
    lib = native.load()
    if lib is None:
        pytest.skip("no C compiler here")
    assert len(list((tmp_path / "cache").glob("rnn_steps-*.so"))) == 1

    monkeypatch.setattr(native._LIBRARY, "tried", False)
    monkeypatch.setattr(native._LIBRARY, "lib", None)
    monkeypatch.setenv("LAYERNORM_CACHE", str(tmp_path / "other"))
    monkeypatch.setenv("CC", "/bin/false")  # a compiler that always fails
    with pytest.warns(native.NativeKernelWarning, match="torch-ops path"):
        assert native.load() is None
    args = make_args("lstm", 3, 2, 4)
    out, h_n, c_n = ln_lstm_sequence(*args)
    torch.testing.assert_close(out, ref_ln_lstm_sequence(*args)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("flags", [("-mno-avx512f",), ("-mno-avx",), ("-fno-openmp",)],
                         ids=["avx2", "sse", "no-openmp"])
def test_native_kernels_other_instruction_sets(tmp_path, monkeypatch, flags):
    """The kernels built for other CPUs (ymm / xmm vectors, other tile sizes) or without OpenMP
    compute the same LN-LSTM and LN-GRU, forward and every gradient, as the reference (x86-64
    only). H = 37 puts the rows' sums (LN statistics and backward, in vectors of 8 or 4 floats
    and four accumulators) through every tail: G = 148 = 4 x 32 + 2 x 8 + 4 with ymm, H = 37 =
    32 + 5 for the LN of c."""
    import ctypes
    import platform
    import shutil


    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs a C compiler on x86-64")
    target = tmp_path / "k.so"
    try:
        native._build(cc, target, extra=flags)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"this compiler does not build with {flags}: {e}")
    lib = ctypes.CDLL(str(target))
    native._declare(lib)
    monkeypatch.setattr(native._LIBRARY, "lib", lib)
    monkeypatch.setattr(native._LIBRARY, "tried", True)
    assert native.where(torch.zeros(1)).c(torch.zeros(1)) is lib

    lens = torch.tensor([5, 3, 5, 1, 0, 4, 5, 2, 2, 5, 1])
    for fn, ref, *_ in KINDS.values():
        for H in (24, 37):
            args = make_args("lstm" if fn is ln_lstm_sequence else "gru", 5, 11, H)
            assert_matches_float64(fn, ref, args, lens)
    w, a = torch.randn(40, 24), torch.randn(7, 24)
    panels = gemm._panels(w, lib.panel_width())
    y = torch.empty(7, panels.shape[0] * lib.panel_width())
    lib.gemm_packed(7, 24, a.data_ptr(), panels.data_ptr(), panels.shape[0], y.data_ptr(),
                    torch.get_num_threads())
    torch.testing.assert_close(y[:, :40], a @ w.t(), atol=1e-4, rtol=1e-5)


# ---- autograd to any order, torch.func, torch.compile / export ---------------------------------

def _input_ln_args(kind, T, B, H, dtype):
    _, _, G, _, _ = KINDS[kind]
    gain_x = (1 + 0.1 * torch.randn(G * H, dtype=dtype)).requires_grad_()
    bias_x = (0.1 * torch.randn(G * H, dtype=dtype)).requires_grad_()
    return gain_x, bias_x


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("lengths,input_ln", [(None, False), (torch.tensor([2, 3, 0]), True)],
                         ids=["full", "lengths-input-ln"])
def test_fused_gradgradcheck_float64(kind, lengths, input_ln):
    """Second derivatives (gradient penalties, MAML) are exact: the backward under
    create_graph=True is itself differentiable."""
    fn = KINDS[kind][0]
    args = make_args(kind, 3, 3, 2, dtype=torch.float64)
    if input_ln:
        args += list(_input_ln_args(kind, 3, 3, 2, torch.float64))

    def f(*a):
        if input_ln:
            return fn(*a[:-2], lengths=lengths, gain_x=a[-2], bias_x=a[-1])
        return fn(*a, lengths=lengths)
    assert torch.autograd.gradgradcheck(f, args, atol=1e-5, rtol=1e-4, fast_mode=True)


@pytest.mark.parametrize("kind", list(KINDS))
def test_fused_double_backward_float32_matches_reference(kind, step_path):
    """A gradient penalty through the float32 fast path (C kernels or torch ops) equals the
    float64 reference's second derivative."""
    fn, ref, *_ = KINDS[kind]
    args = make_args(kind, 5, 6, 8)
    lens = torch.tensor([5, 2, 0, 4, 5, 1])

    def penalty(f, a):
        out = f(*a, lengths=lens)
        grads = torch.autograd.grad(out[0].square().sum(), a, create_graph=True)
        return torch.autograd.grad(sum(g.square().sum() for g in grads), a)

    got = penalty(fn, args)
    expected = penalty(ref, [a.detach().double().requires_grad_() for a in args])
    for i, (a, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(a.double(), e, atol=1e-4 * max(1.0, e.abs().max().item()),
                                   rtol=1e-4, msg=f"argument {i}")


@pytest.mark.parametrize("kind", list(KINDS))
def test_fused_torch_func_grad_and_jacrev(kind):
    """torch.func.grad / jacrev give autograd's gradients (they run the differentiable loop)."""
    fn = KINDS[kind][0]
    args = [a.detach() for a in make_args(kind, 4, 3, 5)]
    lens = torch.tensor([4, 1, 3])
    w = 3 if kind == "lstm" else 2  # position of w_hh

    def loss(w_hh):
        return fn(*args[:w], w_hh, *args[w + 1:], lengths=lens)[0].sum()
    got = torch.func.grad(loss)(args[w])
    w_req = args[w].clone().requires_grad_()
    expected, = torch.autograd.grad(loss(w_req), w_req)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    jac = torch.func.jacrev(lambda h0: fn(args[0], h0, *args[2:], lengths=lens)[1])(args[1])
    assert jac.shape == (3, 5, 3, 5) and torch.isfinite(jac).all()


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_modules_compile_one_opaque_op_no_recompile_per_length(cls):
    """Under torch.compile the recurrence is ONE operator (the time loop is not traced), new
    sequence lengths reuse the graph after the first dynamic recompile, and the numbers are
    eager's."""
    import layernorm
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    m = getattr(layernorm, cls)(6, 8)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(m, backend=counter)
    for T in (5, 7, 9, 11):
        x = torch.randn(T, 3, 6)
        out, _ = compiled(x)
        ref, _ = m(x)
        torch.testing.assert_close(out, ref)
        g, = torch.autograd.grad(out.sum(), m.weight_hh_l0)
        g_ref, = torch.autograd.grad(ref.sum(), m.weight_hh_l0)
        torch.testing.assert_close(g, g_ref)
    assert counter.frame_count <= 2  # static first, then one dynamic graph for every length
    graph = counter.graphs[-1]
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert any(f"ln_{cls.lower()}" in t for t in targets), targets
    assert len(targets) < 40, f"the time loop was traced: {len(targets)} ops"
    torch._dynamo.reset()


def test_modules_export_sees_the_operator():
    import layernorm
    m = layernorm.LSTM(4, 5).eval()
    ep = torch.export.export(m, (torch.randn(3, 2, 4),))
    assert any("layernorm.ln_lstm" in str(n.target) for n in ep.graph.nodes)
    x = torch.randn(3, 2, 4)
    torch.testing.assert_close(ep.module()(x)[0], m(x)[0])


# ---- inference mode, autocast and half types ---------------------------------------------------

@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("path", ["native", "torch-ops"])
def test_modules_under_inference_mode_and_no_grad(cls, path, monkeypatch):
    """Built or run under torch.inference_mode() / no_grad(), then trained: every path works and
    gives the same numbers (as torch.nn.LSTM, which runs there)."""
    import layernorm
    if path == "torch-ops":
        monkeypatch.setattr(fused, "USE_NATIVE", False)
    x = torch.randn(5, 3, 4)
    with torch.inference_mode():
        built = getattr(layernorm, cls)(4, 6, num_layers=2, bidirectional=True)
        first, second = built(x)[0], built(x)[0]
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    m = getattr(layernorm, cls)(4, 6)
    with torch.inference_mode():
        a = m(x)[0]
        m(x)  # the packed weights are reused from the cache
    with torch.no_grad():
        b = m(x)[0]
    c = m(x)[0]
    c.sum().backward()
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.testing.assert_close(a, c.detach(), atol=0, rtol=0)
    assert torch.isfinite(m.weight_hh_l0.grad).all()


HALF_TOL = {torch.bfloat16: 5e-2, torch.float16: 1e-2}  # max abs error vs float32 (outputs ~1)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("dtype", list(HALF_TOL), ids=str)
def test_modules_autocast_and_half_modules(cls, dtype):
    """Under torch.autocast the LN-RNN runs the fast path and returns the dtype torch's module
    returns there (the autocast dtype for the LSTM; float32 for the GRU, which torch does not
    cast on the CPU); a half module computes with float32 statistics; both within the dtype's
    tolerance of the float32 result, and gradients reach the float32 / half parameters."""
    import copy

    import layernorm
    m = getattr(layernorm, cls)(8, 16, num_layers=2)
    x = torch.randn(7, 4, 8)
    ref_out, ref_state = m(x)
    with torch.autocast("cpu", dtype):
        out, state = m(x)
    states = state if isinstance(state, tuple) else (state,)
    want = dtype if cls == "LSTM" else torch.float32
    assert out.dtype == want and all(s.dtype == want for s in states)
    tol = HALF_TOL[dtype]
    torch.testing.assert_close(out.float(), ref_out, atol=tol, rtol=0)
    assert (out.float() - ref_out).abs().mean() < tol / 10
    out.float().sum().backward()
    assert m.weight_hh_l0.grad.dtype == torch.float32 and torch.isfinite(m.weight_hh_l0.grad).all()

    half = copy.deepcopy(m).to(dtype)
    out_h, _ = half(x.to(dtype))
    assert out_h.dtype == dtype
    torch.testing.assert_close(out_h.float(), ref_out, atol=tol, rtol=0)
    out_h.float().sum().backward()
    assert half.weight_hh_l0.grad.dtype == dtype


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_fused_backward_every_length_zero(kind, dtype):
    """Every example of length 0: outputs 0, final states = initial states, gradients flow
    to the initial states only, in any dtype."""
    fn = KINDS[kind][0]
    args = make_args(kind, 3, 2, 4, dtype=dtype)
    outs = fn(*args, lengths=torch.tensor([0, 0]))
    assert (outs[0] == 0).all()
    for o, s in zip(outs[1:], args[1:len(outs)]):
        torch.testing.assert_close(o, s.detach())
    grads = torch.autograd.grad(sum(o.float().sum() for o in outs), args, allow_unused=True)
    for g, s in zip(grads[1:len(outs)], args[1:len(outs)]):
        torch.testing.assert_close(g, torch.ones_like(s))


def test_native_structs_match_the_library():
    """The ctypes mirrors of the kernels' C structs agree with the compiled library."""
    import ctypes

    lib = _native_or_skip()
    native.check_layout(lib)
    assert lib.lstm_struct_size() == ctypes.sizeof(native.LSTMArgs)

    class Shorter(ctypes.Structure):
        _fields_ = native.LSTMArgs._fields_[:-2] + [("dparams", ctypes.c_void_p)]
    old = native.STRUCTS["lstm"]
    try:
        native.STRUCTS["lstm"] = Shorter
        with pytest.raises(RuntimeError, match="does not match"):
            native.check_layout(lib)
    finally:
        native.STRUCTS["lstm"] = old


# ---- the native cache: a trusted build -------------------------------------------------------

def _fresh_load(monkeypatch, cache):
    monkeypatch.setattr(native._LIBRARY, "tried", False)
    monkeypatch.setattr(native._LIBRARY, "lib", None)
    monkeypatch.setenv("LAYERNORM_CACHE", str(cache))
    return native


def _lstm_runs_correctly():
    args = make_args("lstm", 3, 2, 4)
    out = ln_lstm_sequence(*args)[0]
    torch.testing.assert_close(out, ref_ln_lstm_sequence(*args)[0], atol=1e-5, rtol=1e-5)


def _damage_truncate(so):
    so.write_bytes(so.read_bytes()[:so.stat().st_size // 2])


def _damage_garbage(so):
    so.write_bytes(b"\x7fELF" + bytes(range(256)) * 40)


def _damage_garbage_with_its_checksum(so):  # a foreign file that claims to be ours
    import hashlib
    _damage_garbage(so)
    so.with_name(so.name + ".sha256").write_text(hashlib.sha256(so.read_bytes()).hexdigest())


def _damage_directory(so):
    so.unlink()
    so.mkdir()
    (so / "x").write_text("x")


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_garbage,
                                    _damage_garbage_with_its_checksum, _damage_directory],
                         ids=["truncated", "garbage", "foreign", "directory"])
def test_native_cache_damaged_file_is_rebuilt_with_one_warning(tmp_path, monkeypatch, damage):
    """A damaged, foreign or misplaced cached library is never loaded blindly: it is rebuilt
    once, with one warning naming the cause, and the kernels then run correctly (before the
    checksum, a truncated .so killed the process with SIGBUS at its first forward)."""
    import shutil
    native = _fresh_load(monkeypatch, tmp_path / "first")
    if native.load() is None:
        pytest.skip("no C compiler here")
    # the damage happens in a copy of the cache this process has not loaded from (dlopen of a
    # path it already loaded would not read the file again)
    shutil.copytree(tmp_path / "first", tmp_path / "cache")
    so, = (tmp_path / "cache").glob("rnn_steps-*.so")
    assert so.with_name(so.name + ".sha256").exists()
    damage(so)
    native = _fresh_load(monkeypatch, tmp_path / "cache")
    with pytest.warns(native.NativeKernelWarning, match="rebuilding it") as record:
        assert native.load() is not None
    assert len(record) == 1
    _lstm_runs_correctly()
    assert so.is_file() and native._problem(so) is None
    native = _fresh_load(monkeypatch, tmp_path / "cache")  # the next load: silent
    assert native.load() is not None


def test_native_no_compiler_falls_back_with_one_warning(tmp_path, monkeypatch):
    native = _fresh_load(monkeypatch, tmp_path)
    monkeypatch.setenv("CC", "false")
    with pytest.warns(native.NativeKernelWarning, match=r"C compiler 'false' failed.*torch-ops") \
            as record:
        assert native.load() is None
        _lstm_runs_correctly()
        native.load()
    assert len(record) == 1
    monkeypatch.setenv("LAYERNORM_NATIVE", "0")  # silenced
    native = _fresh_load(monkeypatch, tmp_path)
    assert native.load() is None


def test_native_hung_compiler_times_out(tmp_path, monkeypatch):
    native = _fresh_load(monkeypatch, tmp_path / "cache")
    hang = tmp_path / "hang-cc"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setenv("CC", str(hang))
    monkeypatch.setattr(native, "COMPILE_TIMEOUT", 0.5)
    with pytest.warns(native.NativeKernelWarning, match=r"did not finish within 0.5 s"):
        assert native.load() is None
    _lstm_runs_correctly()


def test_native_compiler_with_arguments_and_cache_path_that_is_a_file(tmp_path, monkeypatch):
    """CC='gcc -O2' (a command with arguments) builds; a cache path that is a file gives one
    warning and a build in a temporary directory."""
    import shutil
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    native = _fresh_load(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("CC", f"{cc} -O2")
    assert native.load() is not None
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    native = _fresh_load(monkeypatch, blocked)
    with pytest.warns(native.NativeKernelWarning, match="not a writable directory"):
        assert native.load() is not None
    _lstm_runs_correctly()


@pytest.mark.parametrize("kind", list(KINDS))
def test_fused_empty_batch(kind, step_path):
    """B = 0: empty outputs of the right shapes and empty gradients, on every path."""
    fn = KINDS[kind][0]
    args = make_args(kind, 3, 0, 4)
    outs = fn(*args)
    assert tuple(outs[0].shape) == (3, 0, 4) and all(tuple(o.shape) == (0, 4) for o in outs[1:])
    grads = torch.autograd.grad(sum(o.sum() for o in outs), args)
    assert [g.shape for g in grads] == [a.shape for a in args]


@pytest.mark.parametrize("kind", list(KINDS))
# H = 1, 3, 1023 and B = 1; the backward kernel in ranges of 1 step, of 2-3 steps, of all steps
@pytest.mark.parametrize("T,B,H,chunk_steps,lengths",
                         [(5, 1, 1, 1, None), (7, 3, 3, 2, [7, 2, 0]),
                          (4, 6, 3, 3, [1, 4, 3, 0, 4, 2]), (3, 2, 1023, 0, [3, 1])])
@pytest.mark.parametrize("input_ln", [False, True], ids=["", "input-ln"])
def test_fused_awkward_shapes_and_step_ranges(kind, T, B, H, chunk_steps, lengths, input_ln,
                                              step_path, monkeypatch):
    """Forward and every gradient against the float64 reference at awkward sizes, with the
    backward kernel run over the sequence in ranges of steps (dW_hh summed range by range)."""
    fn, ref, G, *_ = KINDS[kind]
    if chunk_steps:
        monkeypatch.setattr(common, "CHUNK_BYTES", 4 * B * G * H * chunk_steps)
    lens = None if lengths is None else torch.tensor(lengths)
    args = make_args(kind, T, B, H)
    if input_ln:
        args += list(_input_ln_args(kind, T, B, H, torch.float32))
    args64 = [a.detach().double().requires_grad_() for a in args]

    def run(f, a):
        if input_ln:
            return f(*a[:-2], lengths=lens, gain_x=a[-2], bias_x=a[-1])
        return f(*a, lengths=lens)

    def ref_run(a):
        if not input_ln:
            return ref(*a, lengths=lens)
        xg = torch.cat([torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b) for x, g, b in
                        zip(a[0].split(GROUPS[kind](H), -1), a[-2].split(GROUPS[kind](H)),
                            a[-1].split(GROUPS[kind](H)))], -1)
        return ref(xg, *a[1:-2], lengths=lens)
    outs, outs64 = run(fn, args), ref_run(args64)
    g_out = [torch.randn_like(o, dtype=torch.float64) for o in outs64]
    grads = torch.autograd.grad(outs, args, [g.float() for g in g_out])
    grads64 = torch.autograd.grad(outs64, args64, g_out)
    for name, a, b in zip(["out", "h_n", "c_n"], outs, outs64):
        torch.testing.assert_close(a.double(), b, atol=2e-5, rtol=1e-5, msg=name)
    # at H = 1 every LN sees variance 0: rstd = 1 / sqrt(eps) ~ 316 scales float32 rounding
    amplify = 10 if H == 1 else 1
    for i, (a, b) in enumerate(zip(grads, grads64)):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=2e-5 * scale * amplify, rtol=1e-4,
                                   msg=f"gradient of argument {i}")


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("dtype", list(HALF_TOL), ids=str)
@pytest.mark.parametrize("B,H", [(1, 3), (5, 24)])
@pytest.mark.parametrize("native_half_gemm", [False, True], ids=["f32-gemm", "half-gemm"])
def test_half_modules_forward_and_grads_within_the_dtypes_tolerance(cls, dtype, B, H,
                                                                    native_half_gemm,
                                                                    monkeypatch):
    """A half module (and a float32 module under autocast) against the float64 module on the
    same half-rounded values: output, final state and every gradient within a few units of the
    dtype's rounding (float32 statistics and accumulation inside); with the input GEMM in the half
    type (CPUs with native half GEMMs) or in float32 (the others)."""
    import copy

    import layernorm
    monkeypatch.setitem(native._HALF_GEMM, dtype, native_half_gemm)
    torch.manual_seed(1)
    m = getattr(layernorm, cls)(6, H, num_layers=2, bidirectional=True).to(dtype)
    ref = copy.deepcopy(m).double()
    x = torch.randn(9, B, 6).to(dtype)
    g = torch.randn(9, B, 2 * H).to(dtype)
    eps = torch.finfo(dtype).eps

    def run(module, xin, autocast=False):
        with torch.autocast("cpu", dtype, enabled=autocast):
            out, state = module(xin)
        state = state[0] if isinstance(state, tuple) else state
        (out.float() * g.float()).sum().backward()
        grads = [p.grad for p in module.parameters()]
        module.zero_grad(set_to_none=True)
        return out, state, grads

    out64, state64, grads64 = run(ref, x.double())
    as_float = copy.deepcopy(m).float()
    for module, xin, autocast in ((m, x, False), (as_float, x.float(), True)):
        out, state, grads = run(module, xin, autocast)
        # (under autocast a GRU returns float32, as torch.nn.GRU, which CPU autocast leaves alone)
        want = torch.float32 if autocast and cls == "GRU" else dtype
        assert out.dtype == want and state.dtype == want
        # measured: <= 6 eps (outputs), 6 eps of the largest gradient; at H = 3 an LN over 3
        # units amplifies the rounding of its half-type input W_x x: 12 eps, 63 eps
        k = 8 if H > 8 else 20
        # bfloat16 on the CPU's bfloat16 dot products: the forward's W_hh h_{t-1} reads h_{t-1}
        # rounded to bfloat16 (as torch's bfloat16 LSTM); the float64 module rounding the same
        # values moves as far (H = 24: up to 13.4 eps over 24 seeds; docs/rnnfast.md)
        dot = native.load() is not None and native.load().bf16_dot()
        k_out = 16 if dtype == torch.bfloat16 and dot and H > 8 else k
        for name, a, b in (("out", out, out64), ("h_n", state, state64)):
            torch.testing.assert_close(a.double(), b, atol=k_out * eps, rtol=k_out * eps,
                                       msg=name)
        for (name, _), a, b in zip(m.named_parameters(), grads, grads64):
            scale = b.abs().max().item()
            torch.testing.assert_close(a.double(), b, atol=5 * k * eps * max(scale, 1e-3),
                                       rtol=5 * k * eps, msg=f"gradient of {name}")
