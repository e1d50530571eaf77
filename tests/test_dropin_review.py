"""layernorm.LSTM / GRU / RNN and their cells used as a drop-in for torch.nn's, the way a user
would: user-sized layers (hidden 512, two layers, bidirectional, batch_first, proj_size), packed
batches whose lengths change from batch to batch, unsorted, with and without h0 / c0, unbatched
input, several graphs alive at once, dropout between layers, dtype and mode changes, state_dict,
copies and pickles, no_grad / inference_mode, autocast, torch.jit.trace and torch.func.

``norm="none"`` is compared with torch.nn's module holding the same weights (torch's own
state_dict loaded, docs/rnn.md "Parameters"); ``norm="layer"`` with the plain float64 reference
of tests/reference.py (one example, one step at a time) and with the module itself in float64 on
the readable loop (``use_fused = False``) for gradients. torch.compile is not exercised here: its
first compile of a small LN-LSTM takes ~20 s on this machine (test_triton_compile.py covers it).
"""
import copy
import io
import pickle
import warnings

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import PackedSequence, pack_sequence, pad_packed_sequence

import layernorm as L
from tests.reference import ref_recurrent

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

# torch's own note when its LSTM op runs a projection (ours with norm="none" calls that op)
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")

OURS = {"LSTM": L.LSTM, "GRU": L.GRU, "RNN": L.RNN,
        "LSTMCell": L.LSTMCell, "GRUCell": L.GRUCell, "RNNCell": L.RNNCell}
THEIRS = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN,
          "LSTMCell": nn.LSTMCell, "GRUCell": nn.GRUCell, "RNNCell": nn.RNNCell}
F32 = {"atol": 2e-5, "rtol": 2e-5}


# ---- helpers ---------------------------------------------------------------------------------

def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def _tensors(result):
    """A module's or cell's result -> flat list of tensors (PackedSequence data, states)."""
    if isinstance(result, torch.Tensor):
        return [result]
    out = []
    for r in result:
        if isinstance(r, PackedSequence):
            out.append(r.data)
        elif isinstance(r, (tuple, list)):
            out += _tensors(r)
        else:
            out.append(r)
    return out


def _loss(result):
    """A scalar that weighs every output value differently (so permuted rows would show)."""
    total = 0
    for t in _tensors(result):
        w = torch.linspace(-1, 1, t.numel(), dtype=t.dtype).view_as(t)
        total = total + (t * w).sum() + t.sin().sum()
    return total


def _randomize(m):
    """Gains and biases away from their initial 1 / 0, so a wrongly placed one shows."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith("gain"):
                p.uniform_(0.5, 1.5)
            elif name.startswith("bias"):
                p.uniform_(-0.5, 0.5)
    return m


def _reference_layers(m):
    """Our module's parameters in tests/reference.py's per-layer, per-direction dicts."""
    D = 2 if m.bidirectional else 1
    layers = []
    for layer in range(m.num_layers):
        dirs = []
        for d in range(D):
            s = f"_l{layer}" + ("_reverse" if d else "")
            p = {"W_x": "weight_ih", "W_h": "weight_hh", "b_x": "bias_ih", "b_h": "bias_hh",
                 "g": "gain", "g_x": "gain_ih", "g_h": "gain_hh", "g_c": "gain_c",
                 "b_c": "bias_c"}
            dirs.append({k: getattr(m, v + s).detach() for k, v in p.items()
                         if hasattr(m, v + s)})
        layers.append(dirs)
    return layers


def _state(mode, num, B, H, P=None, dtype=torch.float32):
    """hx as the module takes it: (L * D, B, P or H) (and c (L * D, B, H)); B None: unbatched."""
    lead = (num,) if B is None else (num, B)
    h = torch.randn(*lead, P or H, dtype=dtype)
    return (h, torch.randn(*lead, H, dtype=dtype)) if mode == "LSTM" else h


def _pick(hx, b):
    """Example b's states of hx: (h0 (L*D, H), c0 or None)."""
    if hx is None:
        return None, None
    if isinstance(hx, tuple):
        return hx[0][:, b], hx[1][:, b]
    return hx[:, b], None


def _check_against_reference(m, seqs, hx, result, tol):
    """Each example of a packed batch against tests/reference.py's ref_recurrent run alone."""
    out, state = result
    states = state if isinstance(state, tuple) else (state,)
    padded, _ = pad_packed_sequence(out)
    layers = _reference_layers(m)
    for b, seq in enumerate(seqs):
        h0, c0 = _pick(hx, b)
        want_out, want_h, want_c = ref_recurrent(m.mode, seq, layers, h0, c0,
                                                 nonlinearity=m.nonlinearity, eps=m.eps)
        torch.testing.assert_close(padded[:len(seq), b].double(), want_out, **tol)
        torch.testing.assert_close(states[0][:, b].double(), want_h, **tol)
        if want_c is not None:
            torch.testing.assert_close(states[1][:, b].double(), want_c, **tol)


def _as_hx(states, like):
    """A list of state tensors back in the form of ``like`` (a tuple for LSTM, else a tensor)."""
    return None if like is None else (tuple(states) if isinstance(like, tuple) else states[0])


def _grads_match_float64(m, make_input, hx=None, tol=None):
    """Outputs and every parameter's, the input's and h0's (c0's) gradient of ``m`` (float32,
    its default paths) against the same module in float64 on the readable loop."""
    tol = tol or {"atol": 2e-4, "rtol": 2e-4}
    m64 = copy.deepcopy(m).double()
    m64.use_fused = False
    h32 = [] if hx is None else [h.clone().requires_grad_() for h in _tensors(hx)]
    h64 = [h.detach().double().requires_grad_() for h in h32]
    x32, x64 = make_input(torch.float32), make_input(torch.float64)
    leaf32 = x32.data if isinstance(x32, PackedSequence) else x32
    leaf64 = x64.data if isinstance(x64, PackedSequence) else x64
    r32, r64 = m(x32, _as_hx(h32, hx)), m64(x64, _as_hx(h64, hx))
    for a, b in zip(_tensors(r32), _tensors(r64)):
        torch.testing.assert_close(a.double(), b, **tol)
    p32, p64 = list(m.parameters()) + [leaf32] + h32, list(m64.parameters()) + [leaf64] + h64
    g32 = torch.autograd.grad(_loss(r32), p32)
    g64 = torch.autograd.grad(_loss(r64), p64)
    names = [n for n, _ in m.named_parameters()] + ["input"] + [f"hx[{i}]" for i in
                                                                range(len(h32))]
    for name, a, b in zip(names, g32, g64):
        scale = float(b.abs().max()) + 1e-3            # gradients relative to their size
        torch.testing.assert_close(a.double() / scale, b / scale, **tol, msg=name)


def _packed(lengths, I, dtype=torch.float32, seed=0, enforce_sorted=False):
    """(the sequences in float64, make(dtype) -> a PackedSequence of them, new leaves)."""
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randn(n, I, generator=g, dtype=torch.float64) for n in lengths]
    return seqs, lambda dt=dtype: pack_sequence([s.to(dt).requires_grad_() for s in seqs],
                                                 enforce_sorted=enforce_sorted)


# ---- norm="none" is torch.nn's module --------------------------------------------------------

NONE_CASES = [
    ("LSTM", dict(num_layers=2, bidirectional=True), "padded"),
    ("LSTM", dict(num_layers=2, batch_first=True), "packed_h0"),
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=128), "packed"),
    ("LSTM", dict(num_layers=2, proj_size=64, batch_first=True), "unbatched_h0"),
    ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True), "packed_h0"),
    ("GRU", dict(num_layers=2), "unbatched"),
    ("RNN", dict(num_layers=2, bidirectional=True, nonlinearity="relu"), "packed"),
    ("RNN", dict(num_layers=2, batch_first=True), "padded_h0"),
]


@pytest.mark.parametrize("mode,kw,kind", NONE_CASES,
                         ids=[f"{m}-{k}-{'-'.join(kw)}" for m, kw, k in NONE_CASES])
def test_norm_none_is_torch_at_user_sizes(mode, kw, kind):
    """Hidden 512: torch's state_dict loads into ours, and outputs, states and the gradients of
    the input, h0 and every weight are torch's."""
    torch.manual_seed(0)
    I, H, B = 24, 512, 3
    theirs = THEIRS[mode](I, H, **kw)
    ours = OURS[mode](I, H, norm="none", **kw)
    assert ours.load_state_dict(theirs.state_dict()) is not None
    num = kw["num_layers"] * (2 if kw.get("bidirectional") else 1)
    unbatched = kind.startswith("unbatched")
    hx = _state(mode, num, None if unbatched else B, H, kw.get("proj_size")) \
        if kind.endswith("_h0") else None
    if kind.startswith("packed"):
        seqs, make = _packed((5, 2, 7), I)
        inputs = [make(), make()]
    else:
        T = 6
        x = torch.randn(T, I) if unbatched else torch.randn(
            *((B, T) if kw.get("batch_first") else (T, B)), I)
        inputs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    hxs = [None, None] if hx is None else [
        tuple(h.clone().requires_grad_() for h in hx) if isinstance(hx, tuple)
        else hx.clone().requires_grad_() for _ in range(2)]
    got, want = ours(inputs[0], hxs[0]), theirs(inputs[1], hxs[1])
    for a, b in zip(_tensors(got), _tensors(want)):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, **F32)
    def wrt(i, module):
        x = inputs[i].data if isinstance(inputs[i], PackedSequence) else inputs[i]
        return [x] + ([] if hxs[i] is None else _tensors(hxs[i])) + list(module.parameters())

    g_ours = torch.autograd.grad(_loss(got), wrt(0, ours))
    g_theirs = torch.autograd.grad(_loss(want), wrt(1, theirs))
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_norm_none_dropout_between_layers_train_and_eval(mode):
    """dropout=0.5 on two layers: in training the same seed gives torch's masks (padded and
    packed), in eval no dropout, and .train() / .eval() return the module as torch's do."""
    I, H = 8, 32
    theirs = THEIRS[mode](I, H, num_layers=2, dropout=0.5)
    ours = OURS[mode](I, H, num_layers=2, dropout=0.5, norm="none")
    ours.load_state_dict(theirs.state_dict())
    _, make = _packed((4, 6, 3), I)
    for x in (torch.randn(5, 3, I), make()):
        torch.manual_seed(1)
        got = ours(x)
        torch.manual_seed(1)
        want = theirs(x)
        for a, b in zip(_tensors(got), _tensors(want)):
            torch.testing.assert_close(a, b, **F32)
        torch.manual_seed(2)
        again = ours(x)
        assert not torch.equal(_tensors(again)[0], _tensors(got)[0])     # dropout is on
    assert ours.eval() is ours and theirs.eval() is theirs
    x = torch.randn(5, 3, I)
    torch.testing.assert_close(ours(x)[0], ours(x)[0], rtol=0, atol=0)
    torch.testing.assert_close(ours(x)[0], theirs(x)[0], **F32)
    assert ours.train() is ours and ours.training


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_normalized_dropout_between_layers_train_and_eval(mode, norm):
    """dropout=0.5 between two normalized layers: in training two calls differ and differ
    from the module without dropout; in eval the module computes exactly what it computes
    with dropout 0 (batch norm: the same running statistics)."""
    torch.manual_seed(0)
    m = _randomize(OURS[mode](6, 16, num_layers=2, dropout=0.5, norm=norm))
    plain = copy.deepcopy(m)
    plain.dropout = 0.0
    _, make = _packed((4, 6, 6, 3), 6)
    for x in (torch.randn(5, 4, 6), make()):
        a, b = _tensors(m(x))[0], _tensors(m(x))[0]
        assert not torch.equal(a, b)
        assert not torch.allclose(a, _tensors(plain(x))[0], atol=1e-3)
    m.eval()
    plain.load_state_dict(m.state_dict())      # (batch norm: the statistics m has now)
    plain.eval()
    for x in (torch.randn(5, 4, 6), make()):
        for u, v in zip(_tensors(m(x)), _tensors(plain(x))):
            torch.testing.assert_close(u, v, rtol=0, atol=0)


# ---- the autocast dtypes of torch's modules and cells ----------------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_norm_none_under_cpu_bf16_autocast_returns_torchs_dtypes(mode, packed):
    """Under torch.autocast("cpu", torch.bfloat16) every output and state has the dtype torch's
    returns (torch's RNNCell returns bfloat16, its LSTMCell / GRUCell float32, its LSTM
    bfloat16 on padded input), the values torch's; a cell's loop carries its state from step to
    step as torch's does (RNNCell: a bfloat16 state into the next step)."""
    if packed and mode.endswith("Cell"):
        pytest.skip("cells take no PackedSequence")
    torch.manual_seed(0)
    I, H = 8, 16
    theirs = THEIRS[mode](I, H)
    ours = OURS[mode](I, H, norm="none")
    ours.load_state_dict(theirs.state_dict())
    if mode.endswith("Cell"):
        xs = torch.randn(4, 3, I)
        results = []
        for cell in (ours, theirs):
            h, states = None, []
            with torch.autocast("cpu", torch.bfloat16):
                for x in xs:
                    h = cell(x, h)
                    states += _tensors(h)
            results.append(states)
        got, want = results
    else:
        x = make = None
        if packed:
            _, make = _packed((4, 6, 3), I)
        else:
            x = torch.randn(5, 3, I)
        with torch.autocast("cpu", torch.bfloat16):
            got = _tensors(ours(make() if packed else x))
            want = _tensors(theirs(make() if packed else x))
    assert [t.dtype for t in got] == [t.dtype for t in want]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)



@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_normalized_modules_under_cpu_autocast_return_torchs_dtypes(mode, norm, dtype):
    """Under a CPU autocast every output and state of a normalized module (fast path and
    readable loop, padded and unbatched) has the dtype torch's module of that mode returns:
    torch casts its LSTM and RNN, not its GRU, which stays float32. A module torch does not
    cast computes as under autocast and returns the input's dtype (float32 here)."""
    torch.manual_seed(0)
    I, H = 8, 16
    x = torch.randn(5, 16, I)   # (batch norm over 16 examples: a spread bf16 rounds little)
    want = None
    try:
        with torch.autocast("cpu", dtype):
            want = THEIRS[mode](I, H)(x)[0].dtype
    except RuntimeError:   # torch's own module fails under this autocast: the autocast dtype
        want = dtype
    ours = OURS[mode](I, H, num_layers=2, bidirectional=True, norm=norm)
    ref = [t.float() for t in _tensors(ours(x))]
    for fused in (True, False):
        ours.use_fused = fused
        with torch.autocast("cpu", dtype):
            got = _tensors(ours(x))
            if norm == "layer":
                got_one = _tensors(ours(x[:, 0]))
                assert all(t.dtype == want for t in got_one), (fused, [t.dtype for t in got_one])
        assert all(t.dtype == want for t in got), (fused, [t.dtype for t in got])
        # the half type's rounding, which a layer norm of 16 units amplifies where a unit's
        # spread is small: a loose bound on the largest error, a tight one on the mean
        for a, b in zip(got, ref):
            err = (a.float() - b).abs()
            assert err.max() < 0.3 and err.mean() < 1e-2, (fused, err.max(), err.mean())

# ---- norm="layer" against the float64 references ---------------------------------------------

@pytest.mark.parametrize("mode,H", [("LSTM", 512), ("GRU", 96), ("RNN", 96)])
def test_layer_packed_lengths_changing_every_batch_while_training(mode, H):
    """A 2-layer LN model of hidden H trained with SGD on packed unsorted batches whose lengths
    and sizes change every batch (an LN-LSTM of 512 units once failed on its third such batch):
    every batch's outputs, final states and gradients are the float64 module's."""
    torch.manual_seed(0)
    I = 16
    m = _randomize(OURS[mode](I, H, num_layers=2, norm="layer"))
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for k, lengths in enumerate([(5, 3, 4), (2, 6, 6, 1), (4, 1, 3)]):
        _, make = _packed(lengths, I, seed=k)
        _grads_match_float64(m, make)
        loss = _loss(m(make()))
        loss.backward()
        opt.step()
        opt.zero_grad()


LAYER_CASES = [
    ("LSTM", dict(num_layers=2, bidirectional=True), True),
    ("LSTM", dict(num_layers=1, bias=False), False),
    ("GRU", dict(num_layers=2, bidirectional=True), True),
    ("GRU", dict(num_layers=2), False),
    ("RNN", dict(num_layers=2, bidirectional=True, nonlinearity="relu"), True),
    ("RNN", dict(num_layers=1, bias=False), False),
]


@pytest.mark.parametrize("mode,kw,with_h0", LAYER_CASES,
                         ids=[f"{m}-{'-'.join(f'{k}={v}' for k, v in kw.items())}-h0={h}"
                              for m, kw, h in LAYER_CASES])
def test_layer_packed_unsorted_against_the_paper_reference(mode, kw, with_h0):
    """Each example of an unsorted packed batch (h0 / c0 given or not) gets what the plain
    float64 reference (tests/reference.py, from the equations) gives it run alone."""
    torch.manual_seed(0)
    I, H = 6, 24
    m = _randomize(OURS[mode](I, H, norm="layer", **kw))
    seqs, make = _packed((3, 7, 1, 5), I)
    num = kw["num_layers"] * (2 if kw.get("bidirectional") else 1)
    hx = _state(mode, num, len(seqs), H) if with_h0 else None
    with torch.no_grad():
        result = m(make(), hx)
    _check_against_reference(m, seqs, hx, result, {"atol": 3e-5, "rtol": 3e-5})


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_layer_batch_first_with_h0_against_the_paper_reference(mode):
    """batch_first=True takes (B, T, I) input while h0 / c0 stay (L * D, B, H), as torch's: each
    example as the float64 reference run alone."""
    torch.manual_seed(0)
    m = _randomize(OURS[mode](5, 12, num_layers=2, bidirectional=True, batch_first=True))
    x = torch.randn(3, 4, 5)
    hx = _state(mode, 4, 3, 12)
    with torch.no_grad():
        out, state = m(x, hx)
    states = state if isinstance(state, tuple) else (state,)
    layers = _reference_layers(m)
    for b in range(3):
        want = ref_recurrent(mode, x[b], layers, *_pick(hx, b), eps=m.eps)
        for got, w in zip((out[b], *(s[:, b] for s in states)), want):
            torch.testing.assert_close(got.double(), w, atol=3e-5, rtol=3e-5)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("kind", ["batch_first_h0", "unbatched", "unbatched_h0"])
def test_layer_padded_and_unbatched_gradients_against_float64(mode, kind):
    """batch_first with h0, and unbatched (T, I) input with and without a 2-D h0: outputs and
    gradients (input's included) as the float64 module's; unbatched as a batch of one."""
    torch.manual_seed(0)
    I, H, T = 5, 32, 6
    kw = dict(num_layers=2, bidirectional=True, batch_first=kind.startswith("batch_first"))
    m = _randomize(OURS[mode](I, H, norm="layer", **kw))
    unbatched = kind.startswith("unbatched")
    shape = (T, I) if unbatched else (3, T, I)
    x = torch.randn(*shape, dtype=torch.float64)
    hx = _state(mode, 4, None if unbatched else 3, H) if kind.endswith("_h0") else None
    _grads_match_float64(m, lambda dt: x.to(dt).requires_grad_(), hx)
    if unbatched:
        one = m(x.float().unsqueeze(1), None if hx is None else (
            tuple(h.unsqueeze(1) for h in hx) if isinstance(hx, tuple) else hx.unsqueeze(1)))
        for a, b in zip(_tensors(m(x.float(), hx)), _tensors(one)):
            torch.testing.assert_close(a, b.squeeze(1), **F32)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_projection_and_batch_norm_gradients_against_float64(mode, norm):
    """proj_size (LSTM) and norm="batch" on packed input with h0: outputs and gradients as the
    float64 module's (batch norm with 4+ active examples at every step, where float32's
    batch statistics are well conditioned)."""
    torch.manual_seed(0)
    I, H = 5, 24
    kw = dict(num_layers=2, bidirectional=True)
    if mode == "LSTM" and norm == "layer":
        kw["proj_size"] = 7
    m = _randomize(OURS[mode](I, H, norm=norm, **kw))
    lengths = (5, 6, 4, 6, 5, 6) if norm == "batch" else (3, 6, 1, 5)
    _, make = _packed(lengths, I)
    hx = _state(mode, 4, len(lengths), H, kw.get("proj_size"))
    _grads_match_float64(m, make, hx, tol={"atol": 1e-3, "rtol": 1e-3})


# ---- several graphs alive, backward in another order -----------------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
def test_graphs_alive_at_once_backward_in_reverse_order(mode, norm):
    """Four forwards in training (padded of two lengths, two packed batches with steps where
    a single example is active), then their backwards last to first: each gives the gradients
    that a copy of the module as it was before that forward gives alone (batch norm's running
    statistics change between the forwards, and a later call must not invalidate a graph)."""
    torch.manual_seed(0)
    I, H = 5, 16
    m = _randomize(OURS[mode](I, H, num_layers=2, bidirectional=True, norm=norm))
    inputs = [torch.randn(T, 3, I) for T in (4, 1)]
    inputs += [_packed(lengths, I, seed=k)[1]() for k, lengths in enumerate([(3, 5, 2),
                                                                             (1, 4, 4, 2)])]
    before, losses = [], []
    for x in inputs:
        before.append(copy.deepcopy(m))
        losses.append(_loss(m(x)))
    params = list(m.parameters())
    got = {i: torch.autograd.grad(losses[i], params) for i in reversed(range(len(inputs)))}
    for i, x in enumerate(inputs):
        alone = before[i]
        want = torch.autograd.grad(_loss(alone(x)), list(alone.parameters()))
        for a, b in zip(got[i], want):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# ---- dtype, mode, state_dict, copies ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
def test_conversions_state_dict_and_copies(mode, norm):
    """.to(torch.float64) and .double() convert every parameter and floating buffer (the step
    counter stays int64) and compute what the float32 module computes; a state_dict round trip
    into a fresh module, deepcopy, pickle and torch.save / load give the same outputs; .eval()
    / .train() return the module."""
    torch.manual_seed(0)
    cell = mode.endswith("Cell")
    kw = {} if cell else dict(num_layers=2, bidirectional=True, batch_first=True)
    m = _randomize(OURS[mode](5, 12, norm=norm, **kw))
    x = torch.randn(3, 5) if cell else torch.randn(3, 4, 5)
    if norm == "batch":
        m(x)                                    # running statistics away from their start
    assert m.eval() is m and not m.training
    want = _tensors(m(x))
    for convert in (lambda mod: mod.to(torch.float64), lambda mod: mod.double()):
        m64 = convert(copy.deepcopy(m))
        for name, t in list(m64.named_parameters()) + list(m64.named_buffers()):
            assert t.dtype == (torch.long if name == "num_batches_tracked" else torch.float64)
        for a, b in zip(_tensors(m64(x.double())), want):
            assert a.dtype == torch.float64
            torch.testing.assert_close(a, b.double(), atol=1e-5, rtol=1e-5)
    fresh = OURS[mode](5, 12, norm=norm, **kw)
    fresh.load_state_dict(m.state_dict())
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    for other in (fresh.eval(), copy.deepcopy(m), pickle.loads(pickle.dumps(m)),
                  torch.load(buf, weights_only=False)):
        for a, b in zip(_tensors(other(x)), want):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert m.train() is m and m.training


# ---- no_grad and inference_mode --------------------------------------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
def test_no_grad_and_inference_mode_on_padded_input(mode, norm):
    """Under torch.no_grad and torch.inference_mode (inputs made inside it) the outputs are the
    grad-mode ones (eval mode, so batch norm reads the same statistics)."""
    torch.manual_seed(0)
    m = _randomize(OURS[mode](5, 16, num_layers=2, bidirectional=True, norm=norm)).eval()
    x = torch.randn(6, 3, 5)
    want = _tensors(m(x))
    with torch.no_grad():
        got = _tensors(m(x))
    with torch.inference_mode():
        inside = _tensors(m(x.clone()))
    for a, b, c in zip(got, inside, want):
        torch.testing.assert_close(a, c, rtol=0, atol=0)
        torch.testing.assert_close(b, c, **F32)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
def test_inference_mode_packed_sequence_built_inside(mode, norm):
    """A PackedSequence built under torch.inference_mode (its batch_sizes an inference tensor,
    with no version counter) runs as torch.nn's modules run it."""
    torch.manual_seed(0)
    m = OURS[mode](5, 16, num_layers=2, norm=norm).eval()
    seqs = [torch.randn(n, 5) for n in (3, 5, 2)]
    want = m(pack_sequence(seqs, enforce_sorted=False))[0].data
    with torch.inference_mode():
        got = m(pack_sequence(seqs, enforce_sorted=False))[0].data
    torch.testing.assert_close(got, want, **F32)


# ---- torch.jit.trace and torch.func with batch norm in training ------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_jit_trace_in_training(mode, norm):
    """torch.jit.trace of a module in training (batch norm: batch statistics and running
    statistics updated): the traced module computes what the module computes on another batch
    of the same length, and updates the running statistics as the module does."""
    torch.manual_seed(0)
    cell = mode.endswith("Cell")
    m = _randomize(OURS[mode](4, 6, norm=norm))
    shape = (3, 4) if cell else (5, 3, 4)
    example = torch.randn(*shape)
    traced = _quiet(lambda: torch.jit.trace(copy.deepcopy(m), (example,), check_trace=False))
    m(example)                                  # what tracing ran on the traced copy
    for _ in range(2):
        x = torch.randn(*shape)
        for a, b in zip(_tensors(traced(x)), _tensors(m(x))):
            torch.testing.assert_close(a, b, **F32)
    for (name, a), b in zip(m.named_buffers(), traced.buffers()):
        if name != "num_batches_tracked":    # a trace replays tensor ops, not Python counts
            torch.testing.assert_close(b, a, **F32)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"])
def test_torch_func_grad_with_batch_norm(mode):
    """torch.func.grad over functional_call: in training with the buffers captured it raises a
    RuntimeError naming the fixes (as torch.nn.BatchNorm refuses it); with the buffers passed as
    an argument it gives autograd's gradients and updates those buffers as the module would; in
    eval it gives autograd's gradients."""
    torch.manual_seed(0)
    cell = mode.endswith("Cell")
    m = _randomize(OURS[mode](4, 6, norm="batch"))
    x = torch.randn(3, 4) if cell else torch.randn(5, 3, 4)
    params = {k: v.detach() for k, v in m.named_parameters()}
    with pytest.raises(RuntimeError, match=r"norm='batch'\) in training updates its running "
                                           r"statistics.*module\.eval\(\).*named_buffers"):
        torch.func.grad(lambda p: _loss(functional_call(m, p, (x,))))(params)
    for training in (True, False):
        m.train(training)
        ref = copy.deepcopy(m)
        want = torch.autograd.grad(_loss(ref(x)), list(ref.parameters()))
        buffers = {k: v.clone() for k, v in m.named_buffers()}
        got = torch.func.grad(lambda p, b: _loss(functional_call(m, (p, b), (x,))))(params,
                                                                                    buffers)
        for (name, g), w in zip(got.items(), want):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4, msg=name)
        for name, b in ref.named_buffers():
            torch.testing.assert_close(buffers[name], b, atol=1e-6, rtol=1e-6, msg=name)


@pytest.mark.parametrize("mode", ["LSTMCell", "RNNCell", "LSTM", "RNN"])
def test_vmap_over_examples_of_layer_norm_cells_and_one_step_modules(mode):
    """torch.func.vmap over a batch of inputs (a cell's step, a module's one-step sequence)
    computes what a loop over them does, as it does for torch.nn.GRUCell / RNNCell."""
    _vmap_matches_loop(mode)


@pytest.mark.parametrize("mode", ["GRUCell", "GRU"])
def test_vmap_over_examples_of_a_layer_norm_gru_step(mode):
    """torch.func.vmap over the LN-GRU step (its uneven split of the gates), as over
    torch.nn.GRUCell."""
    _vmap_matches_loop(mode)


def _vmap_matches_loop(mode):
    torch.manual_seed(0)
    cell = mode.endswith("Cell")
    m = _randomize(OURS[mode](5, 8, norm="layer"))
    xs = torch.randn(2, 3, 5) if cell else torch.randn(2, 1, 3, 5)     # one step
    got = torch.func.vmap(lambda a: _tensors(m(a))[0])(xs)
    want = torch.stack([_tensors(m(a))[0] for a in xs])
    torch.testing.assert_close(got, want, **F32)


# ---- a fuzz over shapes ----------------------------------------------------------------------

@settings(max_examples=10, deadline=None, derandomize=True)
@given(mode=st.sampled_from(["LSTM", "GRU", "RNN"]),
       lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       I=st.integers(1, 7), H=st.integers(1, 20), layers=st.integers(1, 2),
       bidirectional=st.booleans(), with_h0=st.booleans(), bias=st.booleans(),
       enforce_sorted=st.booleans())
def test_fuzz_layer_norm_shapes_against_the_reference(mode, lengths, I, H, layers,
                                                      bidirectional, with_h0, bias,
                                                      enforce_sorted):
    """Random sizes (down to 1 unit, one example, one step), packed batches sorted or not, h0
    or not, biases or not: every example as the plain float64 reference run alone."""
    torch.manual_seed(0)
    m = _randomize(OURS[mode](I, H, num_layers=layers, bidirectional=bidirectional, bias=bias,
                              norm="layer"))
    if enforce_sorted:
        lengths = sorted(lengths, reverse=True)
    seqs, make = _packed(lengths, I, enforce_sorted=enforce_sorted)
    num = layers * (2 if bidirectional else 1)
    hx = _state(mode, num, len(lengths), H) if with_h0 else None
    with torch.no_grad():
        result = m(make(), hx)
    # H = 1: LN of a single unit is its bias exactly; small H amplifies float32 rounding
    _check_against_reference(m, seqs, hx, result, {"atol": 1e-4, "rtol": 1e-4})
