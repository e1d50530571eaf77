"""The recurrent regularizers of the modules (``recurrent_dropout``, ``zoneout``, ``dropconnect``;
docs/rnn.md, "Recurrent regularizers"): rate 0 is the unregularized module bit for bit, the fast
and readable paths agree given the same masks (gradcheck of the readable one), eval is the
expectation, the masks' statistics, reproducibility from ``torch.manual_seed``, the argument
checks, DropConnect's gradient, and the cells' held masks."""
from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import layernorm
from layernorm.rnn import regularizers as reg

NORMS = ("layer", "batch", "none")
MODES = ("LSTM", "GRU", "RNN")
REGS = {"recurrent_dropout": 0.3, "zoneout": 0.2, "dropconnect": 0.4}


def _stack(mode, *args, **kw):
    return getattr(layernorm, mode)(*args, **kw)


def _cell(mode, *args, **kw):
    return getattr(layernorm, mode + "Cell")(*args, **kw)


def _h(out):
    """h of a cell's return: (h, c) for LSTMCell, h for the others."""
    return out[0] if isinstance(out, tuple) else out


def _run(m, x, seed, hx=None):
    """Output, final state and every gradient (parameters, input) of one training call with
    the masks drawn after ``torch.manual_seed(seed)``."""
    for p in m.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_(True)
    torch.manual_seed(seed)
    out, state = m(x, hx)
    state = state if isinstance(state, tuple) else (state,)
    loss = (out * torch.linspace(-1, 1, out.shape[-1])).sum() + sum(s.square().sum()
                                                                     for s in state)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    return out.detach(), tuple(s.detach() for s in state), grads, x.grad.clone()


# ---- (a) rate 0: exactly the unregularized module -----------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("mode", MODES)
def test_zero_rates_are_the_unregularized_module_bit_for_bit(mode, norm):
    x = torch.randn(6, 3, 4)
    zone = (0.0, 0.0) if mode == "LSTM" else 0.0
    torch.manual_seed(0)
    plain = _stack(mode, 4, 5, num_layers=2, bidirectional=True, norm=norm)
    torch.manual_seed(0)
    zero = _stack(mode, 4, 5, num_layers=2, bidirectional=True, norm=norm,
                  recurrent_dropout=0.0, zoneout=zone, dropconnect=0.0)
    assert repr(zero) == repr(plain)
    a, b = _run(plain, x, 1), _run(zero, x, 1)
    assert torch.equal(a[0], b[0]) and all(torch.equal(u, v) for u, v in zip(a[1], b[1]))
    assert a[2].keys() == b[2].keys() and all(torch.equal(a[2][k], b[2][k]) for k in a[2])
    assert torch.equal(a[3], b[3])
    torch.manual_seed(0)
    c0 = _cell(mode, 4, 5, norm=norm)
    torch.manual_seed(0)
    c1 = _cell(mode, 4, 5, norm=norm, recurrent_dropout=0.0, zoneout=0.0, dropconnect=0.0)
    xs = torch.randn(3, 4)
    assert torch.equal(_h(c0(xs)), _h(c1(xs)))


# ---- (b) the fast and the readable path, given the same masks ---------------------------------

# (norm="none" with recurrent dropout or zoneout runs the readable loop on both settings)
CASES = [("LSTM", "layer", {}), ("GRU", "layer", {}), ("LSTM", "batch", {}),
         ("GRU", "batch", {}), ("RNN", "layer", {}),
         ("LSTM", "layer", {"num_layers": 2, "bidirectional": True}),
         ("GRU", "batch", {"num_layers": 2, "bidirectional": True}),
         ("LSTM", "layer", {"proj_size": 3})]


def _readable(m):
    """A copy of m on the readable path (a copy: batch norm's running statistics, which a
    training call updates, start from the same values)."""
    m = copy.deepcopy(m)
    m.use_fused = False
    return m


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("mode,norm,kw", CASES)
def test_fused_and_readable_paths_agree_with_the_same_masks(mode, norm, kw, packed):
    torch.manual_seed(0)
    zone = (0.3, 0.1) if mode == "LSTM" else 0.2
    m = _stack(mode, 4, 6, norm=norm, recurrent_dropout=0.3, zoneout=zone, dropconnect=0.4,
               **kw)
    x = torch.randn(7, 5, 4)
    if packed:
        lengths = torch.tensor([7, 6, 4, 4, 2])
        pk = pack_padded_sequence(x, lengths, enforce_sorted=False)

        def call(module, seed):
            for p in module.parameters():
                p.grad = None
            data = pk.data.detach().clone().requires_grad_(True)
            torch.manual_seed(seed)
            out, state = module(type(pk)(data, pk.batch_sizes, pk.sorted_indices,
                                         pk.unsorted_indices))
            state = state if isinstance(state, tuple) else (state,)
            padded, _ = pad_packed_sequence(out)
            (padded.sum() + sum(s.sum() for s in state)).backward()
            return padded.detach(), state, {n: p.grad for n, p in module.named_parameters()
                                            if p.grad is not None}, data.grad
        readable = _readable(m)
        fast = call(m, 3)
        slow = call(readable, 3)
    else:
        readable = _readable(m)
        fast = _run(m, x, 3)
        slow = _run(readable, x, 3)
    tol = {"atol": 2e-5, "rtol": 1e-4}
    torch.testing.assert_close(fast[0], slow[0], **tol)
    for a, b in zip(fast[1], slow[1]):
        torch.testing.assert_close(a, b, **tol)
    assert fast[2].keys() == slow[2].keys()
    for k in list(fast[2]) + ["input"]:
        a, b = (fast[3], slow[3]) if k == "input" else (fast[2][k], slow[2][k])
        # float32 sums over steps of gradients up to tens (the C kernels and the loop round
        # differently, each about 1e-5 of the largest entry from float64): relative to it
        scale = b.abs().max().item()
        assert (a - b).abs().max().item() <= 2e-5 + 1e-4 * scale, k
    if norm == "batch":      # the masks are not the same as the unregularized module's output
        return
    torch.manual_seed(0)
    plain = _stack(mode, 4, 6, norm=norm, **kw)
    assert not torch.allclose(plain(x)[0], fast[0])


@pytest.mark.parametrize("mode,norm,kw", [("LSTM", "layer", {}), ("GRU", "layer", {}),
                                          ("LSTM", "batch", {}), ("GRU", "batch", {}),
                                          ("RNN", "layer", {}), ("RNN", "none", {}),
                                          ("GRU", "layer", {"num_layers": 2,
                                                            "bidirectional": True})])
def test_readable_path_gradcheck_float64_with_every_regularizer(mode, norm, kw):
    torch.manual_seed(0)
    zone = (0.3, 0.2) if mode == "LSTM" else 0.25
    m = _stack(mode, 3, 4, norm=norm, recurrent_dropout=0.3, zoneout=zone, dropconnect=0.3,
               dtype=torch.float64, **kw)
    m.use_fused = False
    names = ["weight_hh_l0"] + [n for n in ("gain_hh_l0", "gain") if hasattr(m, n)][:1]
    x = torch.randn(3, 3, 3, dtype=torch.float64, requires_grad=True)
    params = tuple(getattr(m, n).detach().clone().requires_grad_(True) for n in names)

    def f(x, *ps):
        torch.manual_seed(7)                     # the same masks at every evaluation
        return functional_call(m, dict(zip(names, ps)), (x,))[0]
    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("mode", MODES)
def test_cells_fast_and_readable_steps_agree(mode, norm):
    torch.manual_seed(0)
    cell = _cell(mode, 4, 5, norm=norm, recurrent_dropout=0.3, zoneout=0.2, dropconnect=0.4)
    x, h = torch.randn(3, 4), torch.randn(3, 5)
    hx = (h, torch.randn(3, 5)) if mode == "LSTM" else h
    outs = []
    for fused in (True, False):
        cell.use_fused = fused
        cell.reset_dropout_masks()
        torch.manual_seed(4)
        out = cell(x, hx)
        outs.append(torch.cat(out if isinstance(out, tuple) else (out,)))
    torch.testing.assert_close(outs[0], outs[1], atol=2e-6, rtol=1e-5)


# ---- (c) eval: deterministic, the expectation --------------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
def test_eval_zoneout_is_the_expectation_by_hand_lstm_step(norm):
    torch.manual_seed(0)
    z_c, z_h = 0.3, 0.1
    m = layernorm.LSTM(4, 5, norm=norm, zoneout=(z_c, z_h), recurrent_dropout=0.5,
                       dropconnect=0.5)
    plain = layernorm.LSTM(4, 5, norm=norm)
    plain.load_state_dict(m.state_dict())
    m.eval(), plain.eval()
    x, h0, c0 = torch.randn(1, 3, 4), torch.randn(1, 3, 5), torch.randn(1, 3, 5)
    _, (h_c, c_c) = plain(x, (h0, c0))          # the candidate (h~_1, c~_1)
    out, (h1, c1) = m(x, (h0, c0))
    torch.testing.assert_close(h1, z_h * h0 + (1 - z_h) * h_c)
    torch.testing.assert_close(c1, z_c * c0 + (1 - z_c) * c_c)
    torch.testing.assert_close(out, h1)
    again = m(x, (h0, c0))[0]
    assert torch.equal(out, again)               # no sampling in eval


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("mode", MODES)
def test_eval_recurrent_dropout_and_dropconnect_are_the_identity(mode, norm):
    torch.manual_seed(0)
    m = _stack(mode, 4, 5, norm=norm, recurrent_dropout=0.5, dropconnect=0.5, num_layers=2)
    plain = _stack(mode, 4, 5, norm=norm, num_layers=2)
    plain.load_state_dict(m.state_dict())
    x = torch.randn(6, 3, 4)
    m.eval(), plain.eval()
    assert torch.equal(m(x)[0], plain(x)[0])
    c = _cell(mode, 4, 5, norm=norm, recurrent_dropout=0.5, dropconnect=0.5).eval()
    cp = _cell(mode, 4, 5, norm=norm).eval()
    cp.load_state_dict(c.state_dict())
    xs = torch.randn(3, 4)
    torch.testing.assert_close(_h(c(xs)), _h(cp(xs)))


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_eval_zoneout_packed_unbatched_batch_first(mode):
    """Eval zoneout (deterministic): a packed batch gives each example what it gets alone, the
    unbatched and batch_first layouts what the (T, B, I) one gives."""
    torch.manual_seed(0)
    m = _stack(mode, 3, 4, zoneout=0.3, bidirectional=True, num_layers=2).eval()
    seqs = [torch.randn(n, 3) for n in (5, 2, 4)]
    pk = torch.nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)
    out, _ = pad_packed_sequence(m(pk)[0])
    for b, s in enumerate(seqs):
        alone = m(s)[0]                               # unbatched (T, I)
        torch.testing.assert_close(out[:len(s), b], alone, atol=1e-6, rtol=1e-5)
        assert torch.equal(out[len(s):, b], torch.zeros_like(out[len(s):, b]))
    m.batch_first = True
    torch.testing.assert_close(m(seqs[0].unsqueeze(0))[0][0], m(seqs[0])[0])


# ---- (d) the masks' statistics ----------------------------------------------------------------

def _within(mean, expected, var, n):
    se = math.sqrt(var / n)
    assert abs(mean - expected) < 4 * se, (mean, expected, se)


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_mask_keep_rates_and_means(p):
    m = layernorm.LSTM(4, 200, recurrent_dropout=p, zoneout=(p / 2, p), dropconnect=p)
    like = torch.zeros(1)
    h_mask, zone_h, zone_c = m._state_masks(50, 64, like)
    w_mask = m._weight_masks(["_l0"], like)["weight_hh_l0"] / m.weight_hh_l0
    for mask in (h_mask, w_mask):
        n = mask.numel()
        kept = (mask != 0).double()
        _within(kept.mean().item(), 1 - p, p * (1 - p), n)
        _within(mask.double().mean().item(), 1.0, p / (1 - p), n)
    values = h_mask.unique().tolist()
    assert len(values) == 2 and values[0] == 0 and values[1] == pytest.approx(1 / (1 - p))
    for zone, z in ((zone_h, p), (zone_c, p / 2)):
        assert set(zone.unique().tolist()) == {0.0, 1.0}
        _within(zone.double().mean().item(), z, z * (1 - z), zone.numel())
    assert h_mask.shape == (64, 200) and zone_h.shape == zone_c.shape == (50, 64, 200)


def test_one_mask_per_layer_and_direction_per_forward(monkeypatch):
    shapes = []
    sample = reg.dropout_mask

    def spy(shape, p, like):
        shapes.append((tuple(shape), p))
        return sample(shape, p, like)
    monkeypatch.setattr(reg, "dropout_mask", spy)
    m = layernorm.LSTM(3, 4, num_layers=2, bidirectional=True, recurrent_dropout=0.2,
                       dropconnect=0.5, proj_size=2)
    m(torch.randn(5, 6, 3))
    assert sorted(shapes) == sorted([((16, 2), 0.5)] * 4 + [((6, 2), 0.2)] * 4)
    shapes.clear()
    m.eval()(torch.randn(5, 6, 3))
    assert shapes == []


# ---- (e) reproducibility -------------------------------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
def test_same_seed_same_output(norm):
    torch.manual_seed(0)
    m = layernorm.GRU(3, 4, norm=norm, **REGS)
    x = torch.randn(5, 2, 3)
    a, b, c = _run(m, x, 11), _run(m, x, 11), _run(m, x, 12)
    assert torch.equal(a[0], b[0]) and torch.equal(a[3], b[3])
    assert not torch.equal(a[0], c[0])


# ---- (f) bad values -------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [layernorm.LSTM, layernorm.GRU, layernorm.RNN, layernorm.LSTMCell,
                                 layernorm.GRUCell, layernorm.RNNCell])
def test_bad_rates_raise_torch_types_with_clear_messages(cls):
    for name in ("recurrent_dropout", "zoneout", "dropconnect"):
        for bad in ("0.1", None, True):
            with pytest.raises(TypeError, match=rf"{name}.*expected.*received.*Pass"):
                cls(3, 4, **{name: bad})
        for bad in (1.0, -0.1, 1.5, float("nan")):
            with pytest.raises(ValueError, match=rf"{name}.*expected.*\[0, 1\).*received"):
                cls(3, 4, **{name: bad})
    if "LSTM" in cls.__name__:
        assert cls(3, 4, zoneout=(0.5, 0.05)).zoneout == (0.5, 0.05)
        with pytest.raises(ValueError, match="pair"):
            cls(3, 4, zoneout=(0.1, 0.2, 0.3))
        with pytest.raises(TypeError, match="z_h"):
            cls(3, 4, zoneout=(0.1, "x"))
        with pytest.raises(ValueError, match=r"z_c.*\[0, 1\)"):
            cls(3, 4, zoneout=(1.0, 0.1))
    else:
        with pytest.raises(ValueError, match="pair.*LSTM.*one float"):
            cls(3, 4, zoneout=(0.1, 0.2))
    with pytest.raises(TypeError, match="recurrent_dropout"):
        cls(3, 4, recurrent_dropot=0.1)                       # the close keyword is named


def test_keywords_stored_in_repr_from_torch_and_to_torch():
    m = layernorm.LSTM.from_torch(torch.nn.LSTM(3, 4), norm="none", recurrent_dropout=0.25,
                                  zoneout=(0.5, 0.05), dropconnect=0.3)
    assert (m.recurrent_dropout, m.zoneout, m.dropconnect) == (0.25, (0.5, 0.05), 0.3)
    assert "recurrent_dropout=0.25, zoneout=(0.5, 0.05), dropconnect=0.3" in repr(m)
    c = layernorm.GRUCell.from_torch(torch.nn.GRUCell(3, 4), zoneout=0.1)
    assert c.zoneout == 0.1 and "zoneout=0.1" in repr(c)
    assert "zoneout" not in repr(layernorm.GRU(3, 4))
    with pytest.raises(ValueError, match="no torch.nn equivalent.*rates at 0"):
        m.to_torch()


def test_rates_set_after_construction_are_checked_and_used():
    torch.manual_seed(0)
    m = layernorm.LSTM(3, 4).eval()
    x = torch.randn(2, 2, 3)
    plain = m(x)[0]
    m.zoneout = 0.5
    assert m.zoneout == 0.5 and "zoneout=0.5" in repr(m)
    assert not torch.allclose(m(x)[0], plain)
    m.zoneout = 0.0
    assert torch.equal(m(x)[0], plain)
    with pytest.raises(ValueError, match="dropconnect"):
        m.dropconnect = 2
    assert m.dropconnect == 0.0
    cell = layernorm.GRUCell(3, 4, recurrent_dropout=0.5)
    cell(torch.randn(2, 3))
    assert cell._held_masks is not None
    cell.recurrent_dropout = 0.2                 # new rate: the held masks are dropped
    assert cell._held_masks is None and cell.recurrent_dropout == 0.2


# ---- (g) DropConnect: the masked weight, the gradient of the Parameter ------------------------

@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_dropconnect_is_the_masked_weight_and_its_gradient(mode, norm, monkeypatch):
    torch.manual_seed(0)
    m = _stack(mode, 3, 4, norm=norm, dropconnect=0.5)
    masks = {}

    def fixed(shape, p, like):                  # a known mask, remembered per shape
        g = torch.Generator().manual_seed(len(masks) + 1)
        mask = (torch.rand(shape, generator=g) > p).to(like.dtype) / (1 - p)
        masks.setdefault(tuple(shape), mask)
        return masks[tuple(shape)]
    monkeypatch.setattr(reg, "dropout_mask", fixed)
    m.flatten_parameters()
    w = m.weight_hh_l0
    before = w.detach().clone()
    start = copy.deepcopy(m.state_dict())      # batch norm's running statistics before the call
    lengths = torch.tensor([5, 3, 4])
    x = torch.randn(5, 3, 3)
    pk = pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, _ = m(pk)
    padded, _ = pad_packed_sequence(out)
    padded.sum().backward()
    mask = masks[tuple(w.shape)]
    assert isinstance(m.weight_hh_l0, torch.nn.Parameter) and m.weight_hh_l0 is w
    assert torch.equal(w.detach(), before)                       # never changed in place
    assert torch.all(w.grad[mask == 0] == 0) and (w.grad[mask != 0] != 0).float().mean() > 0.9
    # the same as a module whose W_hh is W_hh * M (no DropConnect)
    same = _stack(mode, 3, 4, norm=norm)
    same.load_state_dict(start)
    with torch.no_grad():
        same.weight_hh_l0.mul_(mask)
    same.train()
    ref, _ = pad_packed_sequence(same(pk)[0])
    ref.sum().backward()
    torch.testing.assert_close(padded, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w.grad, same.weight_hh_l0.grad * mask, atol=1e-5, rtol=1e-4)
    assert m._masked is None and m._flat_weights[1] is w


# ---- (h) cells: the mask is held until reset_dropout_masks() -----------------------------------

@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("mode", MODES)
def test_cell_holds_its_masks_until_reset(mode, norm):
    torch.manual_seed(0)
    cell = _cell(mode, 4, 6, norm=norm, recurrent_dropout=0.5, dropconnect=0.5)
    x = torch.randn(3, 4)
    hx = (torch.randn(3, 6), torch.randn(3, 6)) if mode == "LSTM" else torch.randn(3, 6)
    first = _h(cell(x, hx))
    held = cell._held_masks
    assert held is not None and held[1].shape == (3, 6) and held[2].shape == cell.weight_hh.shape
    assert torch.equal(_h(cell(x, hx)), first)     # the same masks
    assert cell._held_masks is held
    cell.reset_dropout_masks()
    assert cell._held_masks is None
    assert not torch.equal(_h(cell(x, hx)), first)   # new masks
    cell(torch.randn(2, 4))                                          # another batch: new masks
    assert cell._held_masks[1].shape == (2, 6)
    zoned = _cell(mode, 4, 6, norm=norm, zoneout=0.5)
    a, b = _h(zoned(x, hx)), _h(zoned(x, hx))
    assert not torch.equal(a, b) and zoned._held_masks is None       # zoneout: per call


# ---- the bench table -------------------------------------------------------------------------

def test_bench_regularizers_rows():
    from layernorm_paper.bench.rnn import bench_regularizers
    rows = bench_regularizers((3, 2, 4, 8), repeat=1, warmup=0, clock="process")
    impls = {(r["cell"], r["impl"]) for r in rows}
    for cell in ("lstm", "gru"):
        assert {(cell, "none"), (cell, "recurrent_dropout=0.25"), (cell, "dropconnect=0.5")} \
            <= impls
    for r in rows:
        assert r["table"] == "regularizers" and r["ratio"] > 0 and math.isfinite(r["ratio"])
        if r["impl"] == "none":
            assert r["ratio"] == 1.0
        assert r["path"] == "fused"      # LN-LSTM / LN-GRU take every mask in the operators
