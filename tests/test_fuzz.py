"""Shapes found by a fuzzer (hypothesis), not by hand: sizes across the C kernels' block edges
(rows in tiles of 12 (6 on AVX2), the gates in column panels of 32 (16), OpenMP from batch 8 and
hidden 64), layer counts, directions, lengths (padded and packed, unsorted), dtypes and norms.
Each drawn module runs its own path (fused, C kernels, torch's op) and the reference, the same
module in float64 on the readable loop (``use_fused = False``, ``layernorm.recurrence``);
outputs, final states and every parameter gradient are compared with a tolerance per dtype.
The kernels' GEMM alone is drawn too (its tiles, blocks of k and threads' split follow the
shape), against torch's product and its own bits on 1-3 threads.

The draws are derandomized: the same examples run on every machine, in a bounded time."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import layernorm as L

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

# sizes at and around the kernels' edges, and any size up to 70
EDGES = [1, 2, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 32, 33, 63, 64, 65]
SIZES = st.one_of(st.sampled_from(EDGES), st.integers(1, 70))
# (atol, rtol) relative to each tensor's scale, for results against float64
# (float32: LN over one unit, H = 1, has variance 0 and multiplies rounding by 1 / sqrt(eps))
TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 6e-2}
SETTINGS = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def configs(draw):
    mode = draw(st.sampled_from(["LSTM", "GRU", "RNN"]))
    norm = draw(st.sampled_from(["layer", "layer", "batch", "none"]))
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float64, torch.bfloat16]))
    H = draw(SIZES)
    if dtype == torch.bfloat16:  # bfloat16 rounding through LN over < 8 units: see the tolerance
        H = max(H, 8)
    I = draw(st.sampled_from([1, 3, 8, 13, 32]))
    layers = draw(st.integers(1, 2))
    bidir = draw(st.booleans())
    T = draw(st.integers(1, 12))
    # batch norm over 2 or 3 running examples is ill-conditioned (a unit whose values nearly
    # agree is divided by their tiny spread): its batches keep 4 examples running throughout
    B = draw(st.integers(4 if norm == "batch" else 1, 26 if H * T <= 400 else 13))
    packed = draw(st.booleans())
    lengths = None
    if packed:
        lengths = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
        lengths[draw(st.integers(0, B - 1))] = T
        if norm == "batch":
            lengths[:4] = [T] * 4
            lengths = draw(st.permutations(lengths))
    return mode, norm, dtype, H, I, layers, bidir, T, B, lengths


def _run(m, x, lengths):
    inp = x if lengths is None else pack_padded_sequence(x, torch.tensor(lengths),
                                                         enforce_sorted=False)
    out, state = m(inp)
    if lengths is not None:
        out = pad_packed_sequence(out)[0]
    outs = (out, *(state if isinstance(state, tuple) else (state,)))
    loss = sum((o.double() * torch.linspace(-1, 1, o.numel(), dtype=torch.float64)
                .view_as(o)).sum() for o in outs)
    return [o.detach() for o in outs], torch.autograd.grad(loss, list(m.parameters()))


@SETTINGS
@given(configs())
def test_modules_fast_path_equals_reference(config):
    mode, norm, dtype, H, I, layers, bidir, T, B, lengths = config
    torch.manual_seed(0)
    m = getattr(L, mode)(I, H, num_layers=layers, bidirectional=bidir, norm=norm)
    with torch.no_grad():  # gains and biases away from 1 and 0
        for name, p in m.named_parameters():
            if name.startswith("gain"):
                p.mul_(0.75 + 0.5 * torch.rand_like(p))
            elif name.startswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    ref = copy.deepcopy(m).double()
    ref.use_fused = False
    m = m.to(dtype)
    x = torch.randn(T, B, I)
    outs, grads = _run(m, x.to(dtype), lengths)
    # the reference starts from the same (rounded) parameters and input
    with torch.no_grad():
        for p, q in zip(ref.parameters(), m.parameters()):
            p.copy_(q.double())
    outs64, grads64 = _run(ref, x.to(dtype).double(), lengths)
    names = ["output", "h_n", "c_n"][:len(outs)] + [n for n, _ in m.named_parameters()]
    # LN over a few units (H < 8: the LSTM's LN of c over H units) is ill-conditioned: units whose
    # values nearly agree have a variance near 0, so rounding is multiplied up to 1 / sqrt(eps);
    # the readable loop in float32 is as far from float64 there (e.g. 4e-4 at H = 3, T = 9)
    tol = TOL[dtype] * (10 if H < 8 else 1)
    for name, a, b in zip(names, [*outs, *grads], [*outs64, *grads64]):
        assert a.dtype == dtype, name
        assert torch.isfinite(a).all(), (name, config)
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=tol * scale, rtol=tol,
                                   msg=lambda msg: f"{name} of {config}: {msg}")


@st.composite
def cell_configs(draw):
    mode = draw(st.sampled_from(["LSTM", "GRU", "RNN"]))
    norm = draw(st.sampled_from(["layer", "none"]))
    # I 128 puts a wide cell's weights above the batch-1 products' split between threads
    return (mode, norm, draw(SIZES), draw(st.sampled_from([1, 5, 16, 128])),
            draw(st.integers(1, 26)), draw(st.integers(1, 4)),
            draw(st.sampled_from([torch.float32, torch.float64])))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(cell_configs())
def test_cells_one_step_path_equals_reference(config):
    """The cells' one-step fast path (C step kernel / torch's cell ops) stepped over a few steps,
    against the same cell in float64 on its readable step."""
    mode, norm, H, I, B, T, dtype = config
    torch.manual_seed(0)
    cell = getattr(L, mode + "Cell")(I, H, norm=norm)
    ref = copy.deepcopy(cell).double()
    ref.use_fused = False
    cell = cell.to(dtype)
    x = torch.randn(T, B, I, dtype=dtype)

    def run(c, x):
        hx, outs = None, []
        for t in range(T):
            hx = c(x[t], hx)
            outs.append(hx[0] if isinstance(hx, tuple) else hx)
        out = torch.stack(outs)
        loss = (out.double() * torch.linspace(-1, 1, out.numel(), dtype=torch.float64)
                .view_as(out)).sum()
        return [out.detach(), *torch.autograd.grad(loss, list(c.parameters()))]

    tol = TOL[dtype]
    for a, b in zip(run(cell, x), run(ref, x.double())):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=tol * scale, rtol=tol,
                                   msg=lambda msg: f"{config}: {msg}")


@st.composite
def inference_configs(draw):
    mode = draw(st.sampled_from(["LSTM", "GRU"]))
    dtype = torch.float32  # (bfloat16's products: tests/test_inference_bf16.py, against its own
    H = draw(SIZES)        # rounding; through 40 steps it is no test of the paths drawn here)
    T = draw(st.integers(1, 40))
    B = draw(st.integers(1, 40))
    lengths = None
    if draw(st.booleans()):
        lengths = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
        lengths[draw(st.integers(0, B - 1))] = T
    return (mode, dtype, H, draw(st.sampled_from([1, 13, 64])), draw(st.integers(1, 2)),
            draw(st.booleans()), T, B, lengths, draw(st.integers(1, 3)))


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(inference_configs())
def test_inference_path_equals_reference(config):
    """Eval modules under ``torch.inference_mode`` (norm="layer": the inference kernels, W_x x_t
    inside the time loop; on 1-3 threads, so that small batches split the columns and larger
    ones the rows, with chunks of several steps' input products) against the same module in
    float64 on its readable loop: within the tolerance, or no farther than 10x the readable loop
    in float32. (Over long sequences float32 rounding grows through the recurrence, and how far
    varies: at one shape, 35 steps of two bidirectional layers of 23 units, four seeds put the
    readable loop 6.5e-5 to 6.8e-3 from float64, and these kernels 0.3-3.7x as far. A wrong row,
    step or column is off by the values' own size.)"""
    mode, dtype, H, I, layers, bidir, T, B, lengths, threads = config
    torch.manual_seed(0)
    m = getattr(L, mode)(I, H, num_layers=layers, bidirectional=bidir, norm="layer").eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith("gain"):
                p.mul_(0.75 + 0.5 * torch.rand_like(p))
    m = m.to(dtype)
    ref = copy.deepcopy(m).double()
    ref.use_fused = False
    readable = copy.deepcopy(m)
    readable.use_fused = False
    x = torch.randn(T, B, I).to(dtype)

    def run(mod, x):
        inp = x if lengths is None else pack_padded_sequence(x, torch.tensor(lengths),
                                                             enforce_sorted=False)
        out, state = mod(inp)
        if lengths is not None:
            out = pad_packed_sequence(out)[0]
        return [out, *(state if isinstance(state, tuple) else (state,))]

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            got = run(m, x)
    finally:
        torch.set_num_threads(before)
    with torch.no_grad():
        want, floor = run(ref, x.double()), run(readable, x)
    for a, b, f in zip(got, want, floor):
        assert a.dtype == dtype
        err = (a.double() - b).abs().max().item() / max(1.0, b.abs().max().item())
        own = (f.double() - b).abs().max().item() / max(1.0, b.abs().max().item())
        assert err <= max(TOL[dtype], 10 * own), (config, err, own)


@st.composite
def gemm_configs(draw):
    # K at and around the rows 4 KB apart (1024, 2048 floats: shorter tiles), at the blocks of
    # 256 k, and any K; a few panels or many (one block of all K where they fit, else blocks)
    K = draw(st.one_of(st.sampled_from([1, 255, 256, 257, 512, 1023, 1024, 1025, 2048]),
                       st.integers(1, 1100)))
    return (draw(st.booleans()), draw(st.integers(1, 80)), K, draw(SIZES | st.integers(1, 300)),
            draw(st.sampled_from([0, 7, 64, 512])))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(gemm_configs())
def test_native_gemm_equals_torch_at_any_shape(config):
    """The C kernels' GEMM, y = a @ W^T (the input term, dx) and y = d^T h (the weight
    gradients, h packed in ranges of rows), at drawn shapes: the tiles' heights, the blocks of
    k and the threads' split follow the shape, and every choice must give the same bits on 1, 2
    and 3 threads, and torch's values."""
    from layernorm.ops import gemm, native
    lib = native.load()
    if lib is None:
        pytest.skip("no C compiler: the C kernels are unavailable")
    transposed, M, K, N, range_rows = config
    width = lib.panel_width()
    npanels = -(-N // width)
    w = torch.randn(N, K)
    a = torch.randn(K, M) if transposed else torch.randn(M, K)
    panels = gemm._panels(w, width)
    h = w.t().contiguous()
    buf = torch.empty(npanels * K * width + 16)
    start = (-buf.data_ptr() // 4) % 16  # 64-byte aligned, as the callers' buffers
    results = []
    for threads in (1, 2, 3):
        y = torch.full((M, npanels * width), float("nan"))
        if transposed:
            status = lib.gemm_packed_at(M, K, a.data_ptr(), h.data_ptr(), N, N,
                                        buf[start:].data_ptr(), y.data_ptr(), threads, 0,
                                        range_rows)
        else:
            status = lib.gemm_packed(M, K, a.data_ptr(), panels.data_ptr(), npanels,
                                     y.data_ptr(), threads)
        assert not status
        results.append(y)
    for y in results[1:]:
        assert torch.equal(y, results[0]), config
    ref = (a.t() if transposed else a) @ w.t()
    torch.testing.assert_close(results[0][:, :N], ref, atol=1e-4 * K ** 0.5, rtol=1e-5,
                               msg=lambda msg: f"{config}: {msg}")
    assert (results[0][:, N:] == 0).all(), config
