"""layernorm.LSTM / GRU / RNN as drop-ins for torch.nn's, on the inputs PyTorch's own module tests
use (its common_modules.py samples for LSTM / GRU / RNN and its packed-sequence tests): every
combination of bias, batch_first, bidirectional, proj_size (LSTM) and nonlinearity (RNN) with two
layers; batched and unbatched input, with and without hx; empty batches; packed unsorted batches;
float64. ``norm="none"`` must give torch's numbers and gradients (it runs torch's own op);
``norm="layer"`` / ``"batch"`` torch's shapes and behaviour. Then torch's exceptions for the same
mistakes, torch's weight lists, TorchScript, tracing and the legacy ONNX exporter."""
import io
import itertools
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pack_sequence

import layernorm as L

DT = torch.float64
IN, HID = 2, 3                                   # torch's sample sizes


def _configs():
    """(mode, constructor kwargs) as torch's module_inputs_torch_nn_{LSTM,GRU,RNN} build them."""
    out = []
    for bias, bf, bidir in itertools.product((False, True), repeat=3):
        base = {"num_layers": 2, "bias": bias, "batch_first": bf, "bidirectional": bidir}
        out += [("LSTM", dict(base, proj_size=p)) for p in (0, 2)]
        out += [("GRU", dict(base))]
        out += [("RNN", dict(base, nonlinearity=nl)) for nl in ("tanh", "relu")]
    return out


CONFIGS = _configs()
OURS = {"LSTM": L.LSTM, "GRU": L.GRU, "RNN": L.RNN}
THEIRS = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}


def _id(case):
    mode, kw = case
    return mode + "-" + "-".join(f"{k}={v}" for k, v in kw.items() if k != "num_layers")


def _state_shapes(mode, kw, batch):
    """torch's h_0 (and c_0) shapes; batch None: unbatched."""
    LD = kw["num_layers"] * (2 if kw["bidirectional"] else 1)
    sizes = [kw.get("proj_size") or HID] + ([HID] if mode == "LSTM" else [])
    return [(LD, s) if batch is None else (LD, batch, s) for s in sizes]


def _hx(mode, kw, batch):
    states = [torch.randn(s, dtype=DT, requires_grad=True) for s in _state_shapes(mode, kw, batch)]
    return tuple(states) if mode == "LSTM" else states[0]


def _flat(result):
    """(output, state) -> list of tensors (PackedSequence data, h, c)."""
    out, state = result
    out = out.data if isinstance(out, PackedSequence) else out
    return [out] + (list(state) if isinstance(state, tuple) else [state])


def _inputs(mode, kw):
    """(name, input, hx) like torch's samples: batched / unbatched (T=3), with and without hx,
    an empty batch, and unsorted packed batches (lengths as torch's packed samples)."""
    bf = kw["batch_first"]
    batched = torch.randn((2, 3, IN) if bf else (3, 2, IN), dtype=DT, requires_grad=True)
    unbatched = torch.randn(3, IN, dtype=DT, requires_grad=True)
    empty = torch.randn((0, 3, IN) if bf else (3, 0, IN), dtype=DT, requires_grad=True)
    seqs = [torch.randn(n, IN, dtype=DT) for n in (3, 5, 2)]
    packed = pack_sequence(seqs, enforce_sorted=False)
    sorted_packed = pack_padded_sequence(torch.randn(5, 2, IN, dtype=DT), torch.tensor([5, 3]))
    return [("batched", batched, None), ("batched+hx", batched, _hx(mode, kw, 2)),
            ("unbatched", unbatched, None), ("unbatched+hx", unbatched, _hx(mode, kw, None)),
            ("empty", empty, None), ("empty+hx", empty, _hx(mode, kw, 0)),
            ("packed", packed, None), ("packed+hx", packed, _hx(mode, kw, 3)),
            ("packed-sorted", sorted_packed, None)]


def _leaves(inp, hx):
    x = [inp] if isinstance(inp, torch.Tensor) and inp.requires_grad else []
    h = [] if hx is None else (list(hx) if isinstance(hx, tuple) else [hx])
    return x + h


def _grads(module, result, leaves):
    outs = _flat(result)
    # A fixed random projection of every output, as torch's gradient tests take.
    gen = torch.Generator().manual_seed(1)
    loss = sum((torch.randn(o.shape, generator=gen, dtype=o.dtype) * o).sum() for o in outs)
    wanted = list(module.parameters()) + leaves
    return torch.autograd.grad(loss, wanted, allow_unused=True)


# ------------------------------------------------------------------------------------------
# norm="none": torch's numbers, gradients and autograd graph
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CONFIGS, ids=_id)
def test_none_equals_torch_on_torchs_module_inputs(case):
    mode, kw = case
    theirs = THEIRS[mode](IN, HID, dtype=DT, **kw)
    ours = OURS[mode].from_torch(theirs, norm="none")
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for name, inp, hx in _inputs(mode, kw):
        a, b = ours(inp, hx), theirs(inp, hx)
        for x, y in zip(_flat(a), _flat(b), strict=True):
            assert x.shape == y.shape, name
            torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)   # the same op
        assert _flat(a)[0].grad_fn.name() == _flat(b)[0].grad_fn.name(), name
        leaves = _leaves(inp, hx)
        for x, y in zip(_grads(ours, a, leaves), _grads(theirs, b, leaves), strict=True):
            if x is None or y is None:
                assert x is None and y is None, name
            else:
                torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)
        if isinstance(a[0], PackedSequence) and b[0].unsorted_indices is not None:
            assert torch.equal(a[0].unsorted_indices, b[0].unsorted_indices)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_none_dropout_and_training_mode_follow_torch(mode):
    theirs = THEIRS[mode](IN, HID, num_layers=3, dropout=0.5, dtype=DT)
    ours = OURS[mode].from_torch(theirs, norm="none")
    x = torch.randn(4, 2, IN, dtype=DT)
    for training in (True, False):
        ours.train(training), theirs.train(training)
        torch.manual_seed(3)
        a = ours(x)
        torch.manual_seed(3)
        b = theirs(x)
        for p, q in zip(_flat(a), _flat(b)):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    torch.manual_seed(4)
    ours.train()
    assert not torch.equal(ours(x)[0], ours(x)[0])      # dropout is live in training


# ------------------------------------------------------------------------------------------
# norm="layer" / "batch": torch's shapes and behaviour on the same inputs
# ------------------------------------------------------------------------------------------

def _normalized(mode, kw, norm):
    m = OURS[mode](IN, HID, norm=norm, dtype=DT, **kw)
    with torch.no_grad():                           # every gain and bias matters
        for n, p in m.named_parameters():
            if n.startswith(("gain", "bias")):
                p.copy_(torch.rand_like(p) + 0.5 if n.startswith("gain") else
                        torch.randn_like(p) * 0.5)
    return m.eval() if norm == "batch" else m       # eval: batch norm of a batch of one


@pytest.mark.parametrize("norm", ["layer", "batch"])
@pytest.mark.parametrize("case", [c for c in CONFIGS[1::4] if not c[1].get("proj_size")] +
                         [c for c in CONFIGS if c[1].get("proj_size")][::2], ids=_id)
def test_normalized_shapes_and_behaviour_on_torchs_module_inputs(case, norm):
    mode, kw = case
    theirs = THEIRS[mode](IN, HID, dtype=DT, **kw)
    ours = _normalized(mode, kw, norm)
    for name, inp, hx in _inputs(mode, kw):
        a, b = ours(inp, hx), theirs(inp, hx)
        assert [t.shape for t in _flat(a)] == [t.shape for t in _flat(b)], name
        assert type(a[0]) is type(b[0]) and type(a[1]) is type(b[1]), name
        assert all(torch.isfinite(t).all() for t in _flat(a)), name
        if name in ("packed+hx", "empty+hx", "unbatched+hx"):
            grads = _grads(ours, a, _leaves(inp, hx))
            assert all(g is None or torch.isfinite(g).all() for g in grads), name
    # Unbatched input is the batch of one (torch's no_batch_dim_reference).
    x = torch.randn(3, IN, dtype=DT)
    hx = _hx(mode, kw, None)
    one = ours(x, hx)
    bd = 0 if kw["batch_first"] else 1
    hx1 = tuple(h.unsqueeze(1) for h in hx) if mode == "LSTM" else hx.unsqueeze(1)
    ref = ours(x.unsqueeze(bd), hx1)
    torch.testing.assert_close(one[0], ref[0].squeeze(bd))
    for p, q in zip(_flat(one)[1:], _flat(ref)[1:]):
        torch.testing.assert_close(p, q.squeeze(1))


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_layer_packed_unsorted_with_hx_equals_each_example_alone(mode):
    kw = {"num_layers": 2, "bidirectional": True, "batch_first": False}
    m = _normalized(mode, kw, "layer")
    seqs = [torch.randn(n, IN, dtype=DT) for n in (2, 5, 3, 5)]
    hx = _hx(mode, kw, 4)
    out, state = m(pack_sequence(seqs, enforce_sorted=False), hx)
    padded, lengths = nn.utils.rnn.pad_packed_sequence(out)
    states = state if mode == "LSTM" else (state,)
    h0 = hx if mode == "LSTM" else (hx,)
    for b, seq in enumerate(seqs):
        alone = tuple(h[:, b:b + 1] for h in h0)
        o, s = m(seq.unsqueeze(1), alone if mode == "LSTM" else alone[0])
        torch.testing.assert_close(padded[:len(seq), b], o[:, 0])
        for full, one in zip(states, s if mode == "LSTM" else (s,)):
            torch.testing.assert_close(full[:, b], one[:, 0])


def test_empty_batch_updates_no_batch_statistics_and_backpropagates():
    m = L.LSTM(IN, HID, num_layers=2, norm="batch")
    out, (h, c) = m(torch.randn(4, 0, IN))
    assert out.shape == (4, 0, HID) and h.shape == c.shape == (2, 0, HID)
    assert m.num_batches_tracked.eq(0).all()
    assert m.running_mean_ih_l0.eq(0).all() and m.running_var_ih_l0.eq(1).all()
    out.sum().backward()                             # connected to the parameters, as torch's
    assert m.weight_ih_l0.grad is not None and m.weight_ih_l0.grad.eq(0).all()
    out, h = L.GRU(IN, HID, batch_first=True, bidirectional=True)(torch.randn(0, 4, IN))
    assert out.shape == (0, 4, 2 * HID) and h.shape == (2, 0, HID)
    for norm in ("layer", "batch", "none"):
        h, c = L.LSTMCell(IN, HID, norm=norm)(torch.randn(0, IN))
        assert h.shape == c.shape == nn.LSTMCell(IN, HID)(torch.randn(0, IN))[0].shape


def _ln(a, g, b, eps=1e-5):
    return F.layer_norm(a, a.shape[-1:], g, b, eps)


def test_layer_lstm_with_projection_follows_the_equations():
    """h_t = W_hr (o * tanh(LN(c_t))): the paper's LN-LSTM with torch's projection."""
    m = _normalized("LSTM", {"proj_size": 2}, "layer")
    x = torch.randn(4, 3, IN, dtype=DT)
    h0, c0 = torch.randn(1, 3, 2, dtype=DT), torch.randn(1, 3, HID, dtype=DT)
    out, (h_n, c_n) = m(x, (h0, c0))
    h, c, outs = h0[0], c0[0], []
    p = {n.replace("_l0", ""): t for n, t in m.named_parameters()}
    for t in range(4):
        gates = (_ln(x[t] @ p["weight_ih"].T, p["gain_ih"], p["bias_ih"])
                 + _ln(h @ p["weight_hh"].T, p["gain_hh"], p["bias_hh"]))
        i, f, g, o = gates.chunk(4, 1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = (o.sigmoid() * _ln(c, p["gain_c"], p["bias_c"]).tanh()) @ p["weight_hr"].T
        outs.append(h)
    torch.testing.assert_close(out, torch.stack(outs))
    torch.testing.assert_close(h_n[0], h)
    torch.testing.assert_close(c_n[0], c)
    assert m.weight_hh_l0.shape == (4 * HID, 2) and m.weight_hr_l0.shape == (2, HID)


# ------------------------------------------------------------------------------------------
# torch's attributes and weight lists
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("proj", [0, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_weight_lists_as_torch_lays_them_out(proj, bias):
    kw = {"num_layers": 2, "bidirectional": True, "bias": bias, "proj_size": proj}
    theirs = nn.LSTM(IN, HID, **kw)
    none = L.LSTM.from_torch(theirs, norm="none")
    assert none._flat_weights_names == theirs._flat_weights_names
    assert all(a is b for a, b in zip(none._flat_weights, none.parameters()))
    assert [[tuple(w.shape) for w in ws] for ws in none.all_weights] == \
        [[tuple(w.shape) for w in ws] for ws in theirs.all_weights]
    assert none.proj_size == theirs.proj_size
    assert none._norm_weights_names == []
    ln = L.LSTM(IN, HID, norm="layer", **kw)
    assert ln._flat_weights_names == theirs._flat_weights_names      # torch's list, exactly
    assert all(w is getattr(ln, n) for w, n in zip(ln._flat_weights, ln._flat_weights_names))
    extra = ["gain_ih", "gain_hh", "gain_c"] + (["bias_c"] if bias else [])
    assert ln._norm_weights_names == [n + s for s in ("_l0", "_l0_reverse", "_l1",
                                                      "_l1_reverse") for n in extra]
    per = len(theirs.all_weights[0])
    assert [[n for n in names[:per]] for names in ln._all_weights] == \
        [[n for n in names] for names in theirs._all_weights]
    assert [names[per:] for names in ln._all_weights] == \
        [[n + s for n in extra] for s in ("_l0", "_l0_reverse", "_l1", "_l1_reverse")]
    assert sorted(ln._flat_weights_names + ln._norm_weights_names) == \
        sorted(n for n, _ in ln.named_parameters())


def _lib(lib, norm):
    """torch.nn's class ``name`` or layernorm's with ``norm``: one check runs against both."""
    if lib == "torch":
        return lambda name, *args, **kw: getattr(nn, name)(*args, **kw)
    return lambda name, *args, **kw: getattr(L, name)(*args, norm=norm, **kw)


LIBS = [("torch", None), ("layernorm", "none"), ("layernorm", "layer"), ("layernorm", "batch")]
LIB_IDS = ["torch.nn"] + [f"layernorm-{n}" for _, n in LIBS[1:]]


@pytest.mark.parametrize("lib,norm", LIBS, ids=LIB_IDS)
def test_weight_norm_as_torchs_test_counts_it(lib, norm):
    """torch's own weight_norm test on an RNN: weight_norm turns one Parameter of
    ``_flat_weights`` into a tensor, remove_weight_norm restores it (and only it)."""
    make = _lib(lib, norm)

    def check(module, name, num_params):
        x = torch.randn(3, 2, 32)
        before = module(x)[0]
        module = torch.nn.utils.weight_norm(module, name=name)
        assert sum(isinstance(p, nn.Parameter) for p in module._flat_weights) == num_params - 1
        torch.testing.assert_close(module(x)[0], before)     # w = g v / |v| is w at first
        module = torch.nn.utils.remove_weight_norm(module, name=name)
        assert sum(isinstance(p, nn.Parameter) for p in module._flat_weights) == num_params
        params = dict(module.named_parameters())
        assert name in module._parameters and module._parameters[name] is not None
        assert name in params and params[name] is not None
        assert name + "_v" not in params and name + "_g" not in params
        assert name + "_v" not in module._parameters and name + "_g" not in module._parameters

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # weight_norm's deprecation; oneDNN's proj_size note
        check(make("LSTM", 32, 32), "weight_ih_l0", 4)
        check(make("LSTM", 32, 32, proj_size=16), "weight_hr_l0", 5)
    m = make("GRU", 4, 5)                                      # the parametrization API
    x = torch.randn(3, 2, 4)
    before = m(x)[0]
    torch.nn.utils.parametrizations.weight_norm(m, "weight_hh_l0")
    torch.testing.assert_close(m(x)[0], before)
    assert len(m._flat_weights) == len(nn.GRU(4, 5)._flat_weights_names)


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_weight_drop_replacing_a_parameter_by_a_tensor(norm):
    """AWD-LSTM's WeightDrop: delete weight_hh_l0, set a plain tensor of that name, forward."""
    m = L.LSTM(IN, HID, norm=norm, dtype=DT)
    x = torch.randn(4, 2, IN, dtype=DT)
    raw = m.weight_hh_l0.detach().clone().requires_grad_()
    ref = L.LSTM(IN, HID, norm=norm, dtype=DT)
    ref.load_state_dict(m.state_dict())
    with torch.no_grad():
        ref.weight_hh_l0.mul_(0.5)
    del m._parameters["weight_hh_l0"]
    m.weight_hh_l0 = raw * 0.5
    out = m(x)[0]
    torch.testing.assert_close(out, ref(x)[0])
    (g,) = torch.autograd.grad(out.sum(), [raw])
    assert g.abs().sum() > 0


def test_forget_bias_option():
    H = HID
    assert L.LSTM(IN, H).bias_ih_l0.eq(0).all()                     # default 0, as the paper
    m = L.LSTM(IN, H, num_layers=2, bidirectional=True, forget_bias=1.0)
    for name, p in m.named_parameters():
        if name.startswith("bias_ih"):
            assert p[H:2 * H].eq(1).all() and p[:H].eq(0).all() and p[2 * H:].eq(0).all()
        elif name.startswith("bias"):
            assert p.eq(0).all(), name
    none = L.LSTM(IN, H, norm="none", forget_bias=1.0)
    bound = 1 / math.sqrt(H)
    f = none.bias_ih_l0[H:2 * H]
    assert (f >= 1 - bound).all() and (f <= 1 + bound).all()
    cell = L.LSTMCell(IN, H, forget_bias=2.0)
    assert cell.bias_ih[H:2 * H].eq(2).all()
    assert "forget_bias=1.0" in repr(m)
    with pytest.raises(ValueError, match="forget_bias applies to an LSTM with biases"):
        L.GRU(IN, H, forget_bias=1.0)
    with pytest.raises(ValueError, match="forget_bias applies to an LSTM with biases"):
        L.LSTM(IN, H, bias=False, forget_bias=1.0)
    with pytest.raises(ValueError, match="from_torch copies the torch module's biases"):
        L.LSTM.from_torch(nn.LSTM(IN, H), forget_bias=1.0)


# ------------------------------------------------------------------------------------------
# torch's exception types for the same mistakes, with our expected / received / fix message
# ------------------------------------------------------------------------------------------

def _torch_error(fn):
    try:
        fn()
    except Exception as e:                          # noqa: BLE001 - we record torch's type
        return type(e)
    return None


def _packed(sorted_indices=None, unsorted_indices=None, bool_sizes=False):
    p = pack_sequence([torch.randn(3, IN), torch.randn(2, IN)], enforce_sorted=False)
    bs = p.batch_sizes.bool() if bool_sizes else p.batch_sizes
    s = p.sorted_indices if sorted_indices is None else sorted_indices
    u = p.unsorted_indices if unsorted_indices is None else unsorted_indices
    return PackedSequence(p.data, bs, s, u)


LSTM_KW = {"num_layers": 2}
FORWARD_MISTAKES = [
    # name, input, hx, message pattern (expected ... received ... fix)
    ("wrong input_size", lambda: torch.randn(3, 2, 7), None,
     r"input_size=2, received shape \(3, 2, 7\).*Build it with input_size=7"),
    ("4-D input", lambda: torch.randn(3, 2, 1, IN), None,
     r"3-D input.*unbatched 2-D.*received a 4-D tensor"),
    ("1-D input", lambda: torch.randn(IN), None, r"received a 1-D tensor"),
    ("wrong h_0", lambda: torch.randn(3, 2, IN),
     lambda: (torch.zeros(1, 2, HID), torch.zeros(2, 2, HID)),
     r"expected hx\[0\] of shape \(2, 2, 3\).*received \(1, 2, 3\).*hx=None"),
    ("wrong c_0", lambda: torch.randn(3, 2, IN),
     lambda: (torch.zeros(2, 2, HID), torch.zeros(2, 5, HID)),
     r"expected hx\[1\] of shape \(2, 2, 3\).*received \(2, 5, 3\)"),
    ("3-D hx, unbatched input", lambda: torch.randn(3, IN),
     lambda: (torch.zeros(2, 1, HID), torch.zeros(2, 1, HID)),
     r"expected hx\[0\] of shape \(2, 3\).*unbatched 2-D input, received \(2, 1, 3\)"),
    ("2-D hx, batched input", lambda: torch.randn(3, 2, IN),
     lambda: (torch.zeros(2, HID), torch.zeros(2, HID)),
     r"expected hx\[0\] of shape \(2, 2, 3\).*received \(2, 3\)"),
    ("hx a tensor", lambda: torch.randn(3, 2, IN), lambda: torch.zeros(2, 2, HID),
     r"hx = \(h_0, c_0\), a tuple of two tensors, received Tensor"),
    ("float64 input", lambda: torch.randn(3, 2, IN, dtype=torch.float64), None,
     r"input of dtype torch.float32 \(its weights'\), received dtype torch.float64.*"
     r"input.to\(torch.float32\)"),
    ("float64 hx", lambda: torch.randn(3, 2, IN),
     lambda: (torch.zeros(2, 2, HID, dtype=torch.float64), torch.zeros(2, 2, HID)),
     r"hx\[0\] of dtype torch.float32.*received torch.float64.*hx\[0\].to\(torch.float32\)"),
    ("integer input", lambda: torch.ones(3, 2, IN, dtype=torch.long), None,
     r"floating-point input of dtype torch.float32.*received dtype torch.int64.*input.to"),
    ("empty sequence", lambda: torch.randn(0, 2, IN), None,
     r"sequence length larger than 0, received input of shape \(0, 2, 2\)"),
    ("bool batch_sizes", lambda: _packed(bool_sizes=True), None,
     r"batch_sizes is a 1-D int64 tensor, received torch.bool.*integer lengths"),
]


@pytest.mark.parametrize("norm", ["none", "layer"])
@pytest.mark.parametrize("name,make_input,make_hx,pattern", FORWARD_MISTAKES,
                         ids=[m[0] for m in FORWARD_MISTAKES])
def test_forward_mistakes_raise_torchs_exception_type(name, make_input, make_hx, pattern, norm):
    theirs = nn.LSTM(IN, HID, **LSTM_KW)
    ours = L.LSTM.from_torch(theirs, norm=norm)
    x, hx = make_input(), (make_hx() if make_hx else None)
    expected = _torch_error(lambda: theirs(x, hx))
    assert expected is not None, f"torch accepts {name}"
    with pytest.raises(expected, match=pattern):
        ours(x, hx)


PACKED_MISTAKES = [   # torch accepts these silently (and computes garbage): ours refuse
    ("not a permutation", lambda: _packed(torch.tensor([0, 0]), torch.tensor([0, 0]))),
    ("not the inverse", lambda: _packed(torch.tensor([0, 1]), torch.tensor([1, 0]))),
    ("out of range", lambda: _packed(torch.tensor([0, 2]), torch.tensor([0, 1]))),
]


@pytest.mark.parametrize("norm", ["none", "layer"])
@pytest.mark.parametrize("name,make", PACKED_MISTAKES, ids=[m[0] for m in PACKED_MISTAKES])
def test_packed_sequence_with_bad_indices_is_refused(name, make, norm):
    with pytest.raises(ValueError, match=r"sorted_indices is a permutation of range\(2\) and "
                                         r"unsorted_indices its inverse.*enforce_sorted=False"):
        L.LSTM(IN, HID, norm=norm)(make())


CONSTRUCTOR_MISTAKES = [
    # name, kwargs, message pattern; torch's type is taken from torch.nn.LSTM with the same kwargs
    ("dropout a string", {"dropout": "0.1"}, r"dropout to be a number.*received '0.1' \(str\)"),
    ("dropout 2", {"dropout": 2}, r"dropout in \[0, 1\], received 2"),
    ("proj_size >= hidden_size", {"proj_size": HID}, r"proj_size smaller than hidden_size=3"),
    ("negative proj_size", {"proj_size": -1}, r"proj_size to be an int >= 0.*received -1"),
    ("typo keyword", {"bidirectonal": True},
     r"unexpected keyword argument 'bidirectonal'. Did you mean 'bidirectional'\?"),
    ("num_layers 0", {"num_layers": 0}, r"num_layers to be a positive int, received 0"),
    ("hidden_size a float", {"hidden_size": 3.0}, r"hidden_size to be a positive int.*float"),
    ("hidden_size 0", {"hidden_size": 0},
     r"hidden_size to be a positive int, received hidden_size=0"),
]


@pytest.mark.parametrize("name,kwargs,pattern", CONSTRUCTOR_MISTAKES,
                         ids=[m[0] for m in CONSTRUCTOR_MISTAKES])
def test_constructor_mistakes_raise_torchs_exception_type(name, kwargs, pattern):
    kw = {"input_size": IN, "hidden_size": HID, **kwargs}
    expected = _torch_error(lambda: nn.LSTM(**kw))
    assert expected is not None
    with pytest.raises(expected, match=pattern):
        L.LSTM(**kw)
    if name == "dropout a string":                     # and a TypeError, as it should be
        with pytest.raises(TypeError):
            L.LSTM(**kw)
    with pytest.raises(expected):
        L.RNN(**kw) if "proj" not in name else L.LSTM(norm="batch", **kw)


OUR_OWN_MISTAKES = [   # arguments torch's RNNs do not have
    (L.LSTM, {"eps": 0}, r"eps to be a finite number > 0.*received eps=0\..*eps=1e-5"),
    (L.LSTM, {"eps": -1}, r"eps to be a finite number > 0.*received eps=-1"),
    (L.GRU, {"eps": float("nan")}, r"eps to be a finite number > 0.*received eps=nan"),
    (L.LSTM, {"momentum": 5}, r"momentum in \(0, 1\].*received momentum=5.*momentum=0.1"),
    (L.LSTM, {"momentum": 0}, r"momentum in \(0, 1\].*received momentum=0"),
    (L.LSTM, {"gain_init": float("nan")}, r"gain_init to be a finite number.*received nan"),
    (L.LSTMCell, {"eps": -1}, r"eps to be a finite number > 0"),
    (L.GRU, {"proj_size": 2}, r"proj_size argument is only supported for LSTM.*Remove"),
    (L.RNN, {"nonlinearity": "sigmoid"}, r"Unknown nonlinearity 'sigmoid'.*expected nonlinearity "
                                         r"'tanh' or 'relu', received 'sigmoid'"),
]


@pytest.mark.parametrize("cls,kwargs,pattern", OUR_OWN_MISTAKES,
                         ids=[f"{c.__name__}-{k}" for c, k, _ in OUR_OWN_MISTAKES])
def test_our_own_arguments_are_checked(cls, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        cls(IN, HID, **kwargs)


def test_typo_keyword_on_rnn_and_cells():
    with pytest.raises(TypeError, match=r"RNN got an unexpected keyword argument 'nrom'. "
                                        r"Did you mean 'norm'\?"):
        L.RNN(IN, HID, nrom="layer")
    with pytest.raises(TypeError, match=r"GRUCell got an unexpected keyword argument 'gain'"):
        L.GRUCell(IN, HID, gain=1.0)


def test_cell_mistakes_raise_torchs_exception_type():
    theirs = nn.LSTMCell(IN, HID)
    ours = L.LSTMCell.from_torch(theirs, norm="none")
    for x, hx in ((torch.randn(2, 7), None), (torch.randn(2, 1, IN), None),
                  (torch.randn(2, IN), (torch.zeros(3, HID), torch.zeros(3, HID)))):
        expected = _torch_error(lambda: theirs(x, hx))
        assert expected is not None
        with pytest.raises(expected, match="expected"):
            ours(x, hx)
    with pytest.raises(ValueError, match=r"does not match weight dtype.*received dtype "
                                         r"torch.float64"):
        ours(torch.randn(2, IN, dtype=torch.float64))


X3 = lambda: torch.randn(3, 2, IN)                # noqa: E731  (T, B, I)

# (name, call(make) that makes the mistake with ``make(cls_name, *args, **kw)``, torch's exception
# type, torch's phrase): each check runs against torch.nn and against layernorm (every norm), as
# torch's own assertRaisesRegex checks do.
TORCH_PHRASES = [
    ("GRU hx size", lambda mk: mk("GRU", IN, HID)(X3(), torch.zeros(2, 2, HID)),
     RuntimeError, r"Expected hidden size \(1, 2, 3\), got \[2, 2, 3\]"),
    ("RNN hx size", lambda mk: mk("RNN", IN, HID)(X3(), torch.zeros(1, 5, HID)),
     RuntimeError, r"Expected hidden size \(1, 2, 3\), got \[1, 5, 3\]"),
    ("RNN unbatched hx size", lambda mk: mk("RNN", IN, HID)(X3()[:, 0], torch.zeros(2, HID)),
     RuntimeError, r"Expected hidden size \(1, 1, 3\), got \[2, 1, 3\]"),
    ("LSTM h0 size", lambda mk: mk("LSTM", IN, HID)(X3(), (torch.zeros(2, 2, HID),
                                                           torch.zeros(1, 2, HID))),
     RuntimeError, r"Expected hidden\[0\] size \(1, 2, 3\), got \[2, 2, 3\]"),
    ("LSTM c0 size", lambda mk: mk("LSTM", IN, HID)(X3(), (torch.zeros(1, 2, HID),
                                                           torch.zeros(1, 5, HID))),
     RuntimeError, r"Expected hidden\[1\] size \(1, 2, 3\), got \[1, 5, 3\]"),
    ("input_size", lambda mk: mk("GRU", IN, HID)(torch.randn(3, 2, 7)),
     RuntimeError, r"input.size\(-1\) must be equal to input_size. Expected 2, got 7"),
    ("input_size unbatched", lambda mk: mk("LSTM", IN, HID)(torch.randn(3, 7)),
     RuntimeError, r"input.size\(-1\) must be equal to input_size. Expected 2, got 7"),
    ("sequence length 0", lambda mk: mk("LSTM", IN, HID)(torch.randn(0, 2, IN)),
     RuntimeError, r"Expected sequence length to be larger than 0 in RNN"),
    ("sequence length 0 batch_first", lambda mk: mk("GRU", IN, HID, batch_first=True)(
        torch.randn(2, 0, IN)), RuntimeError, r"Expected sequence length to be larger than 0"),
    ("proj_size on GRU", lambda mk: mk("GRU", IN, HID, proj_size=1),
     ValueError, r"proj_size argument is only supported for LSTM, not RNN or GRU"),
    ("proj_size on RNN", lambda mk: mk("RNN", IN, HID, proj_size=1),
     ValueError, r"proj_size argument is only supported for LSTM"),
    ("RNN nonlinearity", lambda mk: mk("RNN", IN, HID, nonlinearity="garbage"),
     ValueError, r"Unknown nonlinearity 'garbage'. Select from 'tanh' or 'relu'"),
    ("RNNCell nonlinearity", lambda mk: mk("RNNCell", IN, HID, nonlinearity="garbage")(
        torch.randn(2, IN)), RuntimeError, r"Unknown nonlinearity"),
    ("LSTM 2-D hx, batched input", lambda mk: mk("LSTM", IN, HID)(
        X3(), (torch.zeros(1, HID), torch.zeros(1, HID))),
     RuntimeError, r"For batched 3-D input, hx and cx should also be 3-D but got \(2-D, 2-D\)"),
    ("LSTM 3-D hx, unbatched input", lambda mk: mk("LSTM", IN, HID)(
        torch.randn(3, IN), (torch.zeros(1, 1, HID), torch.zeros(1, 1, HID))),
     RuntimeError, r"For unbatched 2-D input, hx and cx should also be 2-D"),
    ("GRU 2-D hx, batched input", lambda mk: mk("GRU", IN, HID)(X3(), torch.zeros(1, HID)),
     RuntimeError, r"For batched 3-D input, hx should also be 3-D but got 2-D tensor"),
    ("RNN 3-D hx, unbatched input", lambda mk: mk("RNN", IN, HID)(
        torch.randn(3, IN), torch.zeros(1, 1, HID)),
     RuntimeError, r"For unbatched 2-D input, hx should also be 2-D but got 3-D tensor"),
    ("float64 input", lambda mk: mk("LSTM", IN, HID)(X3().double()),
     ValueError, r"RNN input dtype \(torch.float64\) does not match weight dtype "
                 r"\(torch.float32\)"),
    ("integer input", lambda mk: mk("GRU", IN, HID)(X3().long()),
     ValueError, r"does not match weight dtype"),
    ("input on another device", lambda mk: mk("LSTM", IN, HID)(X3().to("meta")),
     RuntimeError, r"Input and parameter tensors are not at the same device"),
    ("hx on another device", lambda mk: mk("LSTM", IN, HID)(
        X3(), (torch.zeros(1, 2, HID, device="meta"), torch.zeros(1, 2, HID))),
     RuntimeError, r"Input and hidden tensors are not at the same device"),
    ("GRU hx on another device", lambda mk: mk("GRU", IN, HID)(
        X3(), torch.zeros(1, 2, HID, device="meta")),
     RuntimeError, r"Input and hidden tensors are not at the same device"),
    ("hidden_size 0", lambda mk: mk("LSTM", IN, 0),
     ValueError, r"hidden_size must be greater than zero"),
    ("input_size 0", lambda mk: mk("GRU", 0, HID), ValueError, r"input_size must be greater"),
    ("hidden_size a float", lambda mk: mk("RNN", IN, 3.0),
     TypeError, r"hidden_size should be of type int, got: float"),
    ("num_layers 0", lambda mk: mk("LSTM", IN, HID, 0),
     ValueError, r"num_layers must be greater than zero"),
    ("proj_size -1", lambda mk: mk("LSTM", IN, HID, proj_size=-1),
     ValueError, r"proj_size should be a positive integer or zero to disable projections"),
    ("proj_size 3", lambda mk: mk("LSTM", IN, HID, proj_size=HID),
     ValueError, r"proj_size has to be smaller than hidden_size"),
    ("dropout 2", lambda mk: mk("LSTM", IN, HID, 2, dropout=2),
     ValueError, r"dropout should be a number in range \[0, 1\]"),
    ("cell input_size", lambda mk: mk("LSTMCell", IN, HID)(torch.randn(2, 7)),
     RuntimeError, r"input has inconsistent input_size: got 7 expected 2"),
    ("cell hx batch", lambda mk: mk("GRUCell", IN, HID)(torch.randn(2, IN), torch.zeros(5, HID)),
     RuntimeError, r"Input batch size 2 doesn't match hidden0 batch size 5"),
    ("cell hx size", lambda mk: mk("LSTMCell", IN, HID)(
        torch.randn(2, IN), (torch.zeros(2, HID), torch.zeros(2, 4))),
     RuntimeError, r"hidden1 has inconsistent hidden_size: got 4, expected 3"),
    ("cell 3-D input", lambda mk: mk("RNNCell", IN, HID)(torch.randn(2, 1, IN)),
     ValueError, r"RNNCell: Expected input to be 1D or 2D, got 3D instead"),
]


@pytest.mark.parametrize("lib,norm", LIBS, ids=LIB_IDS)
@pytest.mark.parametrize("name,call,kind,phrase", TORCH_PHRASES, ids=[m[0] for m in TORCH_PHRASES])
def test_torchs_phrase_in_each_message(name, call, kind, phrase, lib, norm):
    """torch's exception type and torch's words (what its own tests match), for torch.nn and for
    layernorm; ours then say what was expected, what was received and the fix."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)        # dropout with one layer
        with pytest.raises(kind, match=phrase) as caught:
            call(_lib(lib, norm))
    if lib == "layernorm":
        assert "expected" in str(caught.value), str(caught.value)
        if "nonlinearity" in name:                  # torch.nn.RNN's type and torch.nn.RNNCell's
            assert isinstance(caught.value, L.rnn.RNNArgumentError)
            assert isinstance(caught.value, ValueError) and isinstance(caught.value, RuntimeError)


@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_cells_with_zero_units_return_empty_states_as_torch(mode, norm):
    """torch's cells run with hidden_size 0 (and input_size 0); its modules refuse both."""
    for I, H in ((IN, 0), (0, HID)):
        theirs = getattr(nn, mode + "Cell")(I, H)
        ours = getattr(L, mode + "Cell")(I, H, norm=norm)
        assert [p.shape for p in ours.parameters()][:4] == [p.shape for p in theirs.parameters()]
        for x in (torch.randn(4, I, requires_grad=True), torch.randn(I)):
            ours.train(x.dim() == 2)                # batch norm trains on 2 examples or more
            a, b = ours(x), theirs(x)
            a, b = (a, b) if mode == "LSTM" else ((a,), (b,))
            assert [t.shape for t in a] == [t.shape for t in b]
            if H == 0:
                assert all(t.numel() == 0 for t in a)
            if x.requires_grad:                     # connected to the graph, as torch's
                sum(t.sum() for t in a).backward()
    for cls in (L.LSTM, L.GRU, L.RNN):
        with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
            cls(IN, 0, norm=norm)


@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_meta_device_propagates_shapes_as_torch(mode, norm):
    """A module built on ``meta`` runs meta inputs as torch's does: the shapes, nothing computed
    (every path: the fused operators' shape functions, the loop, batch norm's running
    statistics in eval, a PackedSequence, the cells)."""
    kw = {"num_layers": 2, "bidirectional": True}
    theirs = THEIRS[mode](IN, HID, device="meta", **kw)
    ours = OURS[mode](IN, HID, device="meta", norm=norm, **kw)
    packed = pack_sequence([torch.randn(3, IN), torch.randn(2, IN)], enforce_sorted=False)
    for train in (True, False):
        ours.train(train)
        unbatched = [] if train and norm == "batch" else [torch.randn(5, IN, device="meta")]
        for x in [torch.randn(5, 2, IN, device="meta"), *unbatched, packed.to("meta")]:
            a, b = _flat(ours(x)), _flat(theirs(x))
            assert [t.shape for t in a] == [t.shape for t in b]
            assert all(t.is_meta for t in a)
        out = ours(torch.randn(5, 2, IN, device="meta", requires_grad=True))[0]
        out.sum().backward()
    cell = getattr(L, mode + "Cell")(IN, HID, device="meta", norm=norm)
    h = cell(torch.randn(4, IN, device="meta"))
    assert (h[0] if mode == "LSTM" else h).shape == (4, HID)
    with pytest.raises(RuntimeError, match=r"Input and parameter tensors are not at the same "
                                           r"device.*expected an input on its parameters' device "
                                           r"cpu, received one on meta.*input.to\('cpu'\)"):
        OURS[mode](IN, HID, norm=norm)(torch.randn(3, 2, IN, device="meta"))


def test_autocast_skips_the_dtype_check_as_torch():
    m = L.LSTM(IN, HID, norm="none")
    with torch.autocast("cpu", torch.bfloat16):
        out, _ = m(torch.randn(3, 2, IN, dtype=torch.bfloat16))
    assert out.shape == (3, 2, HID)


# ------------------------------------------------------------------------------------------
# TorchScript, tracing, legacy ONNX
# ------------------------------------------------------------------------------------------

def _quiet(fn):
    """Run torch.jit / torch.onnx entry points without their deprecation and tracer warnings;
    return (result, our warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    ours = [w for w in caught if "records" in str(w.message) and "time loop" in str(w.message)]
    return result, ours


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_jit_script_norm_none_is_torchs_module(mode):
    ours = OURS[mode](IN, HID, num_layers=2, bidirectional=True, norm="none")

    class Model(nn.Module):
        def __init__(self, rnn):
            super().__init__()
            self.rnn, self.out = rnn, nn.Linear(2 * HID, 1)

        def forward(self, x):
            return self.out(self.rnn(x)[0])

    model = Model(ours)
    scripted, _ = _quiet(lambda: torch.jit.script(model))
    x = torch.randn(5, 2, IN)
    torch.testing.assert_close(scripted(x), model(x), rtol=0, atol=0)
    # It holds the same parameters: training one trains the other.
    with torch.no_grad():
        ours.weight_hh_l0.add_(0.5)
    torch.testing.assert_close(scripted(x), model(x), rtol=0, atol=0)
    # Scripted alone it is what torch's scripted module is (whose forward is overloaded:
    # some torch versions give it no plain ``forward``).
    alone, _ = _quiet(lambda: torch.jit.script(ours))
    theirs, _ = _quiet(lambda: torch.jit.script(THEIRS[mode](IN, HID)))
    assert alone.original_name == theirs.original_name == mode
    assert hasattr(alone, "forward") == hasattr(theirs, "forward")
    cell = L.LSTMCell(IN, HID, norm="none")
    torch.testing.assert_close(_quiet(lambda: torch.jit.script(cell))[0](x[0])[0], cell(x[0])[0])


@pytest.mark.parametrize("cls", [L.LSTM, L.GRUCell])
def test_jit_script_normalized_says_to_trace(cls):
    with pytest.raises(RuntimeError, match=r"torch.jit.script cannot compile .*norm='layer'.*"
                                           r"Use torch.jit.trace"):
        _quiet(lambda: torch.jit.script(cls(IN, HID)))


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_jit_trace_normalized_records_the_loop_and_says_so(mode, norm):
    m = OURS[mode](IN, HID, bidirectional=True, norm=norm).eval()
    x = torch.randn(3, 2, IN)
    traced, said = _quiet(lambda: torch.jit.trace(m, (x,)))   # the default (fused) path, too
    assert said and "length 3" in str(said[0].message)
    y = torch.randn(3, 4, IN)                                   # another batch, same length
    for a, b in zip(_flat(traced(y)), _flat(m(y))):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_jit_trace_norm_none_any_length():
    m = L.LSTM(IN, HID, norm="none")
    traced, said = _quiet(lambda: torch.jit.trace(m, (torch.randn(5, 2, IN),)))
    assert not said
    y = torch.randn(8, 3, IN)                     # torch's op: right for any length
    torch.testing.assert_close(traced(y)[0], m(y)[0], rtol=0, atol=0)


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_legacy_onnx_export(norm):
    onnx = pytest.importorskip("onnx")
    m = L.LSTM(IN, HID, num_layers=2, norm=norm).eval()
    buf = io.BytesIO()
    import inspect
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters \
        else {}                                   # torch < 2.5: the legacy exporter is the only one
    _quiet(lambda: torch.onnx.export(m, (torch.randn(5, 2, IN),), buf, **legacy))
    graph = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(graph)
    ops = {n.op_type for n in graph.graph.node}
    assert ("LSTM" in ops) == (norm == "none")


def _onnx_run(module, args):
    """Export ``module`` with torch's default exporter (``torch.onnx.export(module, args)``, no
    options) and run the ONNX model in onnxruntime -> its outputs as tensors."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")                 # what the default exporter needs
    import contextlib
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")               # the exporter's own deprecation notes
        program = torch.onnx.export(module, args)
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    flat = [t for a in args for t in (a if isinstance(a, tuple) else (a,))]
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), flat, strict=True)}
    return [torch.from_numpy(o) for o in session.run(None, feeds)]


@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_default_onnx_export_runs_in_onnxruntime(mode, norm):
    """torch.onnx.export's default exporter: the LN-LSTM / LN-GRU operators have no ONNX
    translation, so while it captures the model the stacked modules run the loop of torch ops
    (rnn/modules.py, ``exporting_to_onnx``); the ONNX model computes what the module computes.
    Batch norm: trained on 2 steps, run on 4, so the later steps read the last trained step's
    running statistics."""
    m = OURS[mode](IN, HID, bidirectional=mode == "LSTM", norm=norm)
    if norm == "batch":
        m(torch.randn(2, 4, IN))
    m.eval()
    x = torch.randn(4, 2, IN)
    got = _onnx_run(m, (x,))
    with torch.no_grad():
        want = _flat(m(x))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    if norm == "layer" and mode != "RNN":             # a plain torch.export keeps the operator
        ep = torch.export.export(m, (x,))
        assert any(f"layernorm.ln_{mode.lower()}" in str(n.target) for n in ep.graph.nodes)


def test_default_onnx_export_of_a_cell():
    cell = L.LSTMCell(IN, HID).eval()
    x, h, c = torch.randn(2, IN), torch.randn(2, HID), torch.randn(2, HID)
    got = _onnx_run(cell, (x, (h, c)))
    with torch.no_grad():
        want = cell(x, (h, c))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_readable_loop_is_twice_differentiable(mode):
    m = _normalized(mode, {"bidirectional": True}, "layer")
    m.use_fused = False
    x = torch.randn(3, 2, IN, dtype=DT, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: m(x)[0], (x,), fast_mode=True)


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_functional_call_and_torch_func_grad_read_the_given_parameters(norm):
    m = L.GRU(IN, HID, norm=norm, dtype=DT)
    x = torch.randn(4, 2, IN, dtype=DT)
    params = {k: v.detach() * 1.5 for k, v in m.named_parameters()}
    ref = L.GRU(IN, HID, norm=norm, dtype=DT)
    ref.load_state_dict(params)
    out = torch.func.functional_call(m, params, (x,))[0]
    torch.testing.assert_close(out, ref(x)[0])
    m.use_fused = False                               # torch.func needs the readable loop
    grads = torch.func.grad(lambda p: torch.func.functional_call(m, p, (x,))[0].sum())(params)
    expected = torch.autograd.grad(ref(x)[0].sum(), list(ref.parameters()))
    for (name, g), e in zip(grads.items(), expected):
        torch.testing.assert_close(g, e, msg=name)


def test_a_deleted_weight_keeps_its_place_in_the_weight_lists():
    m = L.LSTM(IN, HID, num_layers=2, norm="layer")
    names = m._flat_weights_names
    del m._parameters["weight_hh_l0"]                 # weight drop, before the tensor is set
    assert m._flat_weights_names == names
    assert m._flat_weights[names.index("weight_hh_l0")] is None
    m.flatten_parameters()                            # torch's short-circuit, no error
    m.to(torch.float64)


class _WordLM(nn.Module):
    """The word-level language model of the PyTorch examples (encoder, RNN, tied decoder)."""

    def __init__(self, rnn_cls, ntoken=11, ninp=4, nlayers=2, **kw):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = rnn_cls(ninp, ninp, nlayers, dropout=0.2, **kw)
        self.decoder = nn.Linear(ninp, ntoken)
        self.decoder.weight = self.encoder.weight                 # tied weights
        self.nlayers, self.nhid = nlayers, ninp

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(output)), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def _train_word_lm(model, steps=4):
    gen = torch.Generator().manual_seed(5)
    data = torch.randint(0, 11, (steps * 5 + 1, 3), generator=gen)
    hidden = model.init_hidden(3)
    losses = []
    torch.manual_seed(6)                                            # the same dropout masks
    for i in range(steps):
        x, y = data[i * 5:(i + 1) * 5], data[i * 5 + 1:(i + 1) * 5 + 1]
        hidden = tuple(h.detach() for h in hidden)                  # repackage_hidden
        model.zero_grad()
        out, hidden = model(x, hidden)
        loss = F.cross_entropy(out.view(-1, 11), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-1.0)
        losses.append(loss.item())
    return losses


def test_word_language_model_trains_as_with_torchs_lstm():
    torch.manual_seed(0)
    theirs = _WordLM(nn.LSTM)
    ours = _WordLM(lambda *a, **k: L.LSTM(*a, norm="none", **k))
    ours.load_state_dict(theirs.state_dict())
    assert _train_word_lm(ours) == _train_word_lm(theirs)           # bitwise, step by step
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name
    ln = _WordLM(lambda *a, **k: L.LSTM(*a, norm="layer", **k))
    losses = _train_word_lm(ln, steps=6)
    assert all(math.isfinite(v) for v in losses)
    assert not ln.rnn.gain_hh_l1.eq(1).all() and not ln.rnn.bias_c_l0.eq(0).all()   # trained
