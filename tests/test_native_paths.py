"""The C kernels' other paths: the plain LSTM (norm="none", no normalization) against torch's
own op, and the AVX2 build (``LAYERNORM_NATIVE_ISA=avx2``: the kernels compiled without
AVX-512, as on a CPU without it) against the float64 reference."""
import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import layernorm
from layernorm import _native_build
from layernorm.ops import gru as ops_gru
from layernorm.ops import lstm as ops_lstm
from layernorm.ops import build, inference, native, sequence
from tests.test_fused import KINDS, assert_matches_float64, make_args

pytestmark = pytest.mark.skipif(native.load() is None, reason="no C compiler: no C kernels")


def _pair(layers=2, bidirectional=True, I=5, H=12, mode="LSTM"):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, mode)(I, H, num_layers=layers, bidirectional=bidirectional)
    return theirs, getattr(layernorm, mode).from_torch(theirs, norm="none")


def _spy(monkeypatch):
    """Record the calls of the plain LSTM / GRU sequence functions."""
    calls = []
    for module, name in ((ops_lstm, "plain_lstm_sequence"), (ops_gru, "plain_gru_sequence")):
        def spy(*args, real=getattr(module, name), **kwargs):
            calls.append(args[0].shape)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, spy)
    return calls


def _grads(m, inputs, outs, weights):
    out, state = outs
    data = out.data if isinstance(out, torch.nn.utils.rnn.PackedSequence) else out
    g = torch.linspace(-1, 1, data.numel()).reshape(data.shape)
    states = state if isinstance(state, tuple) else (state,)
    loss = (data * g).sum() + (states[0] * 0.3).sum() + sum((s * s).sum() for s in states[1:])
    return torch.autograd.grad(loss, [*inputs, *weights])


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_plain_packed_matches_torch_op(monkeypatch, layers, bidirectional, mode):
    """norm="none" on packed input (unsorted lengths, hx given) runs the C time loop without
    normalization: outputs, final states and the gradients of the input, hx and every weight
    (biases included) equal torch's op to float32 rounding."""
    theirs, ours = _pair(layers, bidirectional, mode=mode)
    calls = _spy(monkeypatch)
    T, B, D = 7, 6, 2 if bidirectional else 1
    x = torch.randn(T, B, 5, requires_grad=True)
    lens = torch.tensor([3, 7, 1, 5, 7, 2])
    h0 = (0.5 * torch.randn(layers * D, B, 12)).requires_grad_()
    c0 = (0.5 * torch.randn(layers * D, B, 12)).requires_grad_()
    hx, leaves = ((h0, c0), (x, h0, c0)) if mode == "LSTM" else (h0, (x, h0))
    results = []
    for m in (theirs, ours):
        packed = pack_padded_sequence(x, lens, enforce_sorted=False)
        outs = m(packed, hx)
        results.append((outs, _grads(m, leaves, outs, list(m.parameters()))))
    assert len(calls) == layers * D        # every layer and direction took the C loop
    (o1, g1), (o2, g2) = results
    torch.testing.assert_close(o2[0].data, o1[0].data, atol=2e-6, rtol=1e-5)
    s1, s2 = (o[1] if isinstance(o[1], tuple) else (o[1],) for o in (o1, o2))
    for a, b in zip(s2, s1):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)
    for i, (a, b) in enumerate(zip(g2, g1)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"gradient {i}")


def test_plain_lstm_routing(monkeypatch):
    """Padded input keeps torch's op (its numbers exactly, training or not); packed input with a
    projection, inter-layer dropout in training or a float64 module keeps it too."""
    theirs, ours = _pair(2, False)
    calls = _spy(monkeypatch)
    x = torch.randn(5, 3, 5)
    torch.testing.assert_close(ours(x)[0], theirs(x)[0], rtol=0, atol=0)
    lens = torch.tensor([5, 2, 4])
    for m in (layernorm.LSTM(5, 12, norm="none", proj_size=4),
              layernorm.LSTM(5, 12, num_layers=2, norm="none", dropout=0.5),
              layernorm.LSTM(5, 12, norm="none").double()):
        packed = pack_padded_sequence(x.to(next(m.parameters()).dtype), lens,
                                      enforce_sorted=False)
        with warnings.catch_warnings():  # torch: "LSTM with projections is not supported
            warnings.simplefilter("ignore", UserWarning)  # with oneDNN" (its own op's note)
            m(packed)[0].data.sum().backward()
    assert calls == []


def test_plain_lstm_double_backward_matches_torch_op():
    """create_graph=True: the gradient's gradient through the differentiable loop equals the
    one through torch's op (float64 module: torch's op; the plain function on float32 data)."""
    torch.manual_seed(1)
    T, B, I, H = 4, 3, 2, 5
    theirs = torch.nn.LSTM(I, H).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    lens = torch.tensor([4, 2, 1])
    w_ih, w_hh, b_ih, b_hh = (p.detach().float().requires_grad_() for p in theirs.parameters())
    xw = torch.nn.functional.linear(x.float(), w_ih, b_ih + b_hh)
    h0 = torch.zeros(B, H, requires_grad=True)
    out, h, c = ops_lstm.plain_lstm_sequence(xw, h0, h0 * 0, w_hh,
                                             torch.tensor([3, 2, 1, 1]))
    g_ours = torch.autograd.grad((out ** 2).sum() + h.sum(), w_hh, create_graph=True)[0]
    gg_ours = torch.autograd.grad((g_ours ** 2).sum(), w_hh)[0]
    packed = pack_padded_sequence(x, lens)
    out_t, (h_t, _) = theirs(packed, (torch.zeros(1, B, H, dtype=torch.float64),) * 2)
    out_t = torch.nn.utils.rnn.pad_packed_sequence(out_t)[0]
    g_t = torch.autograd.grad((out_t ** 2).sum() + h_t.sum(), theirs.weight_hh_l0,
                              create_graph=True)[0]
    gg_t = torch.autograd.grad((g_t ** 2).sum(), theirs.weight_hh_l0)[0]
    torch.testing.assert_close(g_ours.double(), g_t, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gg_ours.double(), gg_t, atol=1e-4, rtol=1e-4)


def test_plain_gru_double_backward_matches_torch_op():
    """The GRU's create_graph=True path (the differentiable loop, b_hn inside the reset gate's
    product) against torch's float64 op."""
    torch.manual_seed(2)
    T, B, I, H = 4, 3, 2, 5
    theirs = torch.nn.GRU(I, H).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    w_ih, w_hh, b_ih, b_hh = (p.detach().float().requires_grad_() for p in theirs.parameters())
    xw = torch.nn.functional.linear(x.float(), w_ih,
                                    b_ih + torch.cat([b_hh[:2 * H], b_hh.new_zeros(H)]))
    out, h = ops_gru.plain_gru_sequence(xw, torch.zeros(B, H), w_hh, b_hh[2 * H:],
                                        torch.tensor([3, 2, 1, 1]))
    g_ours = torch.autograd.grad((out ** 2).sum() + h.sum(), b_hh, create_graph=True)[0]
    gg_ours = torch.autograd.grad((g_ours ** 2).sum(), w_hh)[0]
    packed = pack_padded_sequence(x, torch.tensor([4, 2, 1]))
    out_t, h_t = theirs(packed)
    out_t = torch.nn.utils.rnn.pad_packed_sequence(out_t)[0]
    g_t = torch.autograd.grad((out_t ** 2).sum() + h_t.sum(), theirs.bias_hh_l0,
                              create_graph=True)[0]
    gg_t = torch.autograd.grad((g_t ** 2).sum(), theirs.weight_hh_l0)[0]
    torch.testing.assert_close(g_ours.double(), g_t, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gg_ours.double(), gg_t, atol=1e-4, rtol=1e-4)


def test_plain_lstm_refuses_where_it_does_not_apply():
    xw, h0, w = torch.randn(2, 1, 8, dtype=torch.float64), torch.zeros(1, 2), torch.randn(8, 2)
    with pytest.raises(RuntimeError, match="eager CPU float32"):
        ops_lstm.plain_lstm_sequence(xw, h0, h0, w)


# ---- the AVX2 build ------------------------------------------------------------------------

@pytest.fixture
def avx2_kernels(monkeypatch):
    """The kernels built with LAYERNORM_NATIVE_ISA=avx2 (cached under their own key) in place
    of this process's library."""
    monkeypatch.setenv("LAYERNORM_NATIVE_ISA", "avx2")
    library = _native_build.Library(native.KERNEL)
    monkeypatch.setattr(native, "_LIBRARY", library)
    if native.load() is None:
        pytest.skip("the AVX2 build is not available here")
    return native.load()


def test_avx2_build_has_its_own_key_and_vectors(avx2_kernels, monkeypatch):
    cc = native.compiler()
    avx2_path = _native_build.cached_path(native.KERNEL, cc)
    assert "-mno-avx512f" in build.simd_name(avx2_kernels)
    monkeypatch.setenv("LAYERNORM_NATIVE_ISA", "native")
    assert _native_build.cached_path(native.KERNEL, cc) != avx2_path
    with open("/proc/cpuinfo") as f:
        avx = " avx2" in f.read()
    if avx:  # x86 with AVX2: 8-float vectors, two per panel
        assert avx2_kernels.panel_width() == 16


def test_avx2_gemm_tiles_match_torch_mm(avx2_kernels):
    """Every row count of the AVX2 tiles (1 x 8 vectors ... 5-6 x 2, then several tiles) and a
    ragged last panel."""
    lib = avx2_kernels
    from layernorm.ops.gemm import _panels
    K, N = 19, 3 * lib.panel_width() + 5
    w = torch.randn(N, K)
    wp = _panels(w, lib.panel_width())
    for M in (1, 2, 3, 4, 5, 6, 7, 13, 20):
        a = torch.randn(M, K)
        y = torch.empty(M, wp.shape[0] * lib.panel_width())
        lib.gemm_packed(M, K, a.data_ptr(), wp.data_ptr(), wp.shape[0], y.data_ptr(),
                        torch.get_num_threads())
        torch.testing.assert_close(y[:, :N], a @ w.t(), atol=1e-5, rtol=1e-5, msg=f"M={M}")


def test_avx2_packer_writes_the_panels_layout(avx2_kernels):
    """The AVX2 build's ``pack_panels`` (panels of 16 floats: one 16 x 16 block a panel's width)
    at ragged rows and k, both orientations, against the layout's definition."""
    width = avx2_kernels.panel_width()
    for g, k in ((53, 19), (16, 16), (100, 33)):
        w = torch.randn(g, k)
        for transposed, a in ((0, w), (1, w.t())):
            rows = a.shape[0]
            out = torch.full((-(-rows // width), a.shape[1], width), float("nan"))
            avx2_kernels.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(), 0, 2)
            expected = torch.nn.functional.pad(a, (0, 0, 0, -rows % width))
            assert torch.equal(out, expected.reshape(-1, width, a.shape[1]).transpose(1, 2))
            assert not avx2_kernels.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(),
                                                1, 1)


@pytest.mark.parametrize("kind", list(KINDS))
def test_avx2_kernels_match_reference(avx2_kernels, kind):
    """LN-LSTM / LN-GRU forward and every gradient on the AVX2 build, with lengths and two
    OpenMP threads' row blocks, against the float64 reference."""
    fn, ref, *_ = KINDS[kind]
    T, B, H = 5, 10, 40
    lens = torch.tensor([5, 2, 5, 1, 3, 4, 5, 0, 2, 5])
    args = make_args(kind, T, B, H)
    assert_matches_float64(fn, ref, args, lens)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_avx2_cells_one_row_split_between_threads(avx2_kernels, mode):
    """The batch-1 step on the AVX2 build, with weights above the products' split between two
    threads (I 37, H 130: the GRU's 390 rows not a multiple of four), against the float64 cell:
    values, and the gradients of the input and weights."""
    torch.manual_seed(0)
    cell = getattr(layernorm, f"{mode}Cell")(37, 130)
    twin = getattr(layernorm, f"{mode}Cell")(37, 130, dtype=torch.float64)
    twin.load_state_dict({k: v.double() for k, v in cell.state_dict().items()})
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(1, 37, requires_grad=True)
        got, want = cell(x), twin(x.detach().double().requires_grad_())
        with torch.no_grad():
            fast = cell(x)
    finally:
        torch.set_num_threads(before)
    got, want, fast = [o if isinstance(o, tuple) else (o,) for o in (got, want, fast)]
    for u, v, w in zip(got, want, fast):
        torch.testing.assert_close(u.double(), v, atol=3e-4, rtol=3e-4)
        torch.testing.assert_close(w.double(), v, atol=3e-4, rtol=3e-4)
    sum(o.sum() for o in got).backward()
    sum(o.sum() for o in want).backward()
    for (name, p), q in zip(cell.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad.double(), q.grad, atol=1e-3, rtol=1e-3, msg=name)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_avx2_plain_matches_torch_op(avx2_kernels, monkeypatch, mode):
    test_plain_packed_matches_torch_op(monkeypatch, 1, False, mode)


def test_unknown_isa_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setenv("LAYERNORM_NATIVE_ISA", "avx9000")
    library = _native_build.Library(native.KERNEL)
    with pytest.warns(_native_build.NativeKernelWarning, match="LAYERNORM_NATIVE_ISA='avx9000'"):
        assert library.get() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert library.get() is None  # once per process


def test_every_part_of_the_kernel_source_keys_the_cache(tmp_path):
    """``_rnn_steps.c`` is one compilation unit in parts (``#include``d): every part file beside
    it is reached from it, each stays under 500 lines, and an edit to any part changes the
    cache key (so the edit is rebuilt, never a stale library loaded)."""
    import dataclasses
    import shutil
    ops = native.KERNEL.source.parent
    parts = _native_build.sources(native.KERNEL)
    assert parts[0] == native.KERNEL.source
    assert set(parts) == set(ops.glob("_rnn_steps*.c")), "a part that the build never reads"
    for path in parts:
        assert len(path.read_text().splitlines()) < 500, path.name
    for path in parts:
        shutil.copy(path, tmp_path / path.name)
    kernel = dataclasses.replace(native.KERNEL, source=tmp_path / native.KERNEL.source.name)
    key = _native_build.cached_path(kernel, "cc")
    assert key == _native_build.cached_path(native.KERNEL, "cc")
    for path in parts[1:]:
        copy = tmp_path / path.name
        copy.write_text(path.read_text() + "/* edited */\n")
        assert _native_build.cached_path(kernel, "cc") != key, path.name
        copy.write_text(path.read_text())
    (tmp_path / parts[-1].name).unlink()
    with pytest.raises(_native_build.NativeUnavailable, match="cannot be read"):
        _native_build.cached_path(kernel, "cc")


# ---- inference: the input GEMM inside the time loop ---------------------------------------------

def _input_term64(kind, x, w_ih, gain_x, bias_x):
    """The float64 input term of the reference: LN(W_x x) (the GRU: [r, z] and n separately)."""
    xw = x.double() @ w_ih.double().t()
    groups = [xw.shape[-1]] if kind == "lstm" else [xw.shape[-1] * 2 // 3, xw.shape[-1] // 3]
    parts, k = [], 0
    for n in groups:
        parts.append(torch.nn.functional.layer_norm(xw[..., k:k + n], (n,),
                                                    gain_x[k:k + n].double(),
                                                    bias_x[k:k + n].double()))
        k += n
    return torch.cat(parts, -1)


_SPLIT = inference._split


@pytest.fixture(autouse=True)
def _the_c_rule(monkeypatch):
    """The inference kernels' split between threads by the C's rule: at 4-7 rows a thread
    ``inference._split`` times both splits in turn, so which one a test ran would depend on the
    tests before it. The tests of a split set their own."""
    monkeypatch.setattr(inference, "_split", lambda key, batch, nthreads: (0, None))


def _inference_case(kind, T, B, I, H, packed):
    """(inference call's results, the C sequence kernel's on the same W_x x, the float64
    reference's), the batch sorted by decreasing length where ``packed``."""
    fn, ref, G = KINDS[kind][0], KINDS[kind][1], KINDS[kind][2] * H
    torch.manual_seed(1)
    args = [a.detach() for a in make_args(kind, T, B, H)][1:]       # states, w_hh, gains
    n_states = KINDS[kind][3]
    x, w_ih = torch.randn(T, B, I), torch.randn(G, I) / I ** 0.5
    gain_x, bias_x = 1 + 0.1 * torch.randn(G), 0.1 * torch.randn(G)
    lengths = torch.arange(T, T - B, -1).clamp(min=0) if packed else None
    sizes = None if lengths is None else (lengths.unsqueeze(0) > torch.arange(T).unsqueeze(1)).sum(1)
    call = inference.ln_lstm_inference if kind == "lstm" else inference.ln_gru_inference
    states, rest = args[:n_states], args[n_states:]
    with torch.inference_mode():
        assert sequence.choose_inference(x, w_ih, *args)
        ours = call(x, *states, w_ih, rest[0], gain_x, bias_x, *rest[1:], batch_sizes=sizes)
        lib = native.load()
        from layernorm.ops.gemm import _panels
        wxp = _panels(w_ih, lib.panel_width())
        xw = torch.empty(T * B, wxp.shape[0] * lib.panel_width())
        lib.gemm_packed(T * B, I, x.data_ptr(), wxp.data_ptr(), wxp.shape[0], xw.data_ptr(),
                        torch.get_num_threads())
        xw = xw[:, :G].reshape(T, B, G).contiguous()
        seq = fn(xw, *args, gain_x=gain_x, bias_x=bias_x, batch_sizes=sizes)
    xg64 = _input_term64(kind, x, w_ih, gain_x, bias_x)
    ref64 = ref(xg64, *(a.double() for a in args), lengths=lengths)
    return ours, seq, ref64


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
# (threads, T, B, I, H): a thread takes the input products of 64 / (its rows) steps at once (one
# thread: 4 steps of 1 row, 7 + 2 steps of 10 rows; two threads at B = 20: 7 + 2 steps of each
# block's 10 rows, copied together); a batch of fewer than 8 rows a thread splits the columns
# (forward_seq_cols: 2 threads at B = 1, both products' columns; at B = 5 over two chunks of 13
# steps' input products, and at B = 10, W_hh h's columns and each thread its own rows' W_x x; 3
# threads over 3 panels at B = 3, a row each)
@pytest.mark.parametrize("threads,T,B,I,H", [(1, 4, 1, 7, 16), (1, 9, 10, 33, 40),
                                             (2, 9, 20, 33, 40), (2, 5, 10, 33, 40),
                                             (2, 6, 1, 7, 40),
                                             (2, 20, 5, 33, 40), (3, 7, 3, 9, 24)])
def test_inference_kernels_match_float64_and_the_sequence_kernel(kind, packed, threads, T, B, I,
                                                                  H):
    """``ln_lstm_inference`` / ``ln_gru_inference`` (W_x x_t inside the time loop, nothing
    saved): the float64 reference to 1e-5, and the sequence kernel on W_x x from the same GEMM
    bit for bit (same sums, same order); with lengths, on one and two threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ours, seq, ref64 = _inference_case(kind, T, B, I, H, packed)
    finally:
        torch.set_num_threads(before)
    for a, b, r in zip(ours, seq, ref64):
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("B,path", [(8, 1), (8, 2), (24, 0)], ids=["8-columns", "8-rows", "24"])
def test_inference_kernels_at_a_users_size(kind, B, path, monkeypatch):
    """H 512, 40 steps, lengths that differ per row, on 2 threads: at batch 8 the column path
    (each thread its own rows' W_x x_t) and the rows path (4 rows a thread), at 24 the rows path
    (chunks of input products of several steps): the sequence kernel's bits and the float64
    reference."""
    monkeypatch.setattr(inference, "_split", lambda key, batch, nthreads: (path, None))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ours, seq, ref64 = _inference_case(kind, 40, B, 64, 512, True)
    finally:
        torch.set_num_threads(before)
    for a, b, r in zip(ours, seq, ref64):
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), r, atol=1e-4, rtol=1e-4)  # 40 steps of 512


@pytest.mark.parametrize("kind", list(KINDS))
def test_inference_times_both_splits_then_keeps_one(kind, monkeypatch):
    """At 4-7 rows a thread the first calls of a shape run the columns' and the rows' split in
    turn, ``SPLIT_TRIES`` timed calls each, then keep the one of least time a step: every call
    gives the same bits; outside that range the C's rule runs and nothing is timed."""
    monkeypatch.setattr(inference, "_split", _SPLIT)
    monkeypatch.setattr(inference, "_SPLITS", {})
    paths = []
    call = native.call

    def spy(*args, **fields):
        if "x" in fields:  # the inference kernel's call (not the sequence kernel's)
            paths.append(fields["path"])
        return call(*args, **fields)
    monkeypatch.setattr(native, "call", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        calls = 2 * inference.SPLIT_TRIES + 2
        runs = [_inference_case(kind, 9, 8, 33, 40, True)[0] for _ in range(calls)]
        _inference_case(kind, 9, 16, 33, 40, False)  # 8 rows a thread: the rule
    finally:
        torch.set_num_threads(before)
    n = 2 * inference.SPLIT_TRIES
    assert sorted(paths[:n]) == [1] * (n // 2) + [2] * (n // 2)
    (kept,) = inference._SPLITS.values()
    assert kept in (1, 2) and paths[n:] == [kept, kept, 0] and len(inference._SPLITS) == 1
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, runs[0]))


@pytest.mark.parametrize("kind", list(KINDS))
def test_avx2_inference_kernels_match_float64(avx2_kernels, kind):
    ours, seq, ref64 = _inference_case(kind, 5, 10, 33, 40, True)
    for a, b, r in zip(ours, seq, ref64):
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("T,B", [(3, 0), (0, 2)])
def test_inference_kernels_empty_batch_or_sequence(T, B):
    """No rows or no steps: empty outputs, the initial states returned."""
    I, H = 5, 8
    x, h0, c0 = torch.randn(T, B, I), torch.randn(B, H), torch.randn(B, H)
    g, b = torch.ones(4 * H), torch.zeros(4 * H)
    with torch.no_grad():
        out, h, c = inference.ln_lstm_inference(x, h0, c0, torch.randn(4 * H, I),
                                             torch.randn(4 * H, H), g, b, g, b, g[:H], b[:H])
        out_g, h_g = inference.ln_gru_inference(x, h0, torch.randn(3 * H, I), torch.randn(3 * H, H),
                                             g[:3 * H], b[:3 * H], g[:2 * H], b[:2 * H], g[:H],
                                             b[:H])
    assert out.shape == out_g.shape == (T, B, H)
    assert torch.equal(h, h0) and torch.equal(c, c0) and torch.equal(h_g, h0)


def test_inference_kernel_refuses_save_and_raw_input_term():
    """The input GEMM inside the kernel runs only without saving and with the input's LN."""
    lib = native.load()
    x, h = torch.randn(2, 1, 3), torch.zeros(1, 4)
    with pytest.raises(RuntimeError, match="input GEMM inside the kernel"):
        native.call(lib, "lstm_forward_seq", native.LSTMArgs, "test", T=2, B=1, H=4, I=3, x=x,
                    wxp=x, wp=x, h0=h, out=torch.empty(2, 1, 4), h_n=h, c_n=h)


def test_inference_does_not_apply_where_a_graph_is_wanted():
    x, w = torch.randn(2, 1, 3), torch.randn(4, 3, requires_grad=True)
    assert sequence.choose_inference(x, w) is None
    with torch.no_grad():
        assert sequence.choose_inference(x, w)
        assert sequence.choose_inference(x.double(), w.double()) is None


# ---- the cells' products at batch 1 ----------------------------------------------------------

def test_matvec_rows_matches_torch():
    """``matvec_rows``: y = a @ W^T with W in torch's (N, K) layout, K not a multiple of the
    vector width and N not a multiple of the four rows taken at once."""
    lib = native.load()
    for M, K, N in ((1, 7, 5), (1, 128, 1024), (2, 37, 18), (3, 16, 4)):
        a, w = torch.randn(M, K), torch.randn(N, K)
        y = torch.empty(M, N)
        lib.matvec_rows(M, K, a.data_ptr(), w.data_ptr(), N, y.data_ptr())
        torch.testing.assert_close(y, a @ w.t(), atol=1e-5, rtol=1e-5, msg=f"{M, K, N}")


@pytest.mark.parametrize("cls", [layernorm.LSTMCell, layernorm.GRUCell])
def test_cell_at_batch_one_without_grad_equals_with_grad(cls):
    """Without autograd a batch-1 step takes its two products through ``matvec_rows``; with
    autograd through ``F.linear``: the same new state to float32 rounding, over a few steps."""
    torch.manual_seed(0)
    cell = cls(9, 20)
    xs = torch.randn(5, 1, 9)
    states = []
    for grad in (False, True):
        state = None
        with torch.set_grad_enabled(grad):
            for x in xs:
                state = cell(x, state)
        states.append(state if isinstance(state, tuple) else (state,))
    for a, b in zip(*states):
        torch.testing.assert_close(a, b.detach(), atol=1e-6, rtol=1e-5)


def test_the_compile_timeout_is_read_from_the_environment(monkeypatch):
    from layernorm import _native_build
    monkeypatch.delenv("LAYERNORM_COMPILE_TIMEOUT", raising=False)
    assert _native_build._compile_timeout() == 60.0
    monkeypatch.setenv("LAYERNORM_COMPILE_TIMEOUT", "240")
    assert _native_build._compile_timeout() == 240.0
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv("LAYERNORM_COMPILE_TIMEOUT", bad)
        with pytest.raises(ValueError, match="LAYERNORM_COMPILE_TIMEOUT must be a positive"):
            _native_build._compile_timeout()
