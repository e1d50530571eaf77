"""The modules at the shapes and batch patterns of real training, each compared with a reference:
the same module in float64 on the readable loop (``use_fused = False``: ``layernorm.recurrence``,
itself tested against tests/reference.py), or torch's own module.

Hidden 512 stacked and bidirectional with every norm; lengths changing every batch, padded and
packed (5..400 in one unsorted batch); several graphs alive (encoder-decoder, truncated BPTT with
carried states); inference mode and eval at changing shapes; two threads; a 5,000-step sequence;
the memory of 60 batches of changing shapes; 50 Adam updates against torch.nn.LSTM."""
import copy
import os
import threading

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import layernorm as L
from layernorm.ops import common

MODES = ("LSTM", "GRU", "RNN")
NORMS = ("layer", "batch", "none")


def _randomize(m, seed=0):
    """Gains and biases away from their initial values (gain_init: 1 for layer norm, 0.1 for
    batch norm) and 0, so that every parameter matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith("gain"):
                p.copy_((torch.rand(p.shape, generator=g) * 0.5 + 0.75) * m.gain_init)
            elif name.startswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return m


def _contracting(m):
    """An LSTM's recurrent-term gains at 0.5: at gains 1 (torch's initialization) the LN-LSTM
    amplifies a perturbation of its state step after step (docs/rnn.md, "Long sequences"), so
    float32 and float64 runs of a few hundred steps part by far more than their rounding."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith("gain_hh"):
                p.mul_(0.5)
    return m


def _reference(m):
    """m in float64 on the readable loop."""
    ref = copy.deepcopy(m).double()
    ref.use_fused = False
    return ref


def _run(m, x, lengths=None, hx=None):
    """(outputs, final states, parameter grads) of a fixed weighted loss on everything returned."""
    inp = x if lengths is None else pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, state = m(inp) if hx is None else m(inp, hx)
    if lengths is not None:
        out = pad_packed_sequence(out)[0]
    states = state if isinstance(state, tuple) else (state,)
    outs = (out, *states)
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum()
               for o in outs)
    grads = torch.autograd.grad(loss, [p for p in m.parameters()])
    return [o.detach() for o in outs], list(grads)


def _assert_matches(got, want, names=None, tol=1e-5):
    """float32 results against float64 ones: within tol of each tensor's scale (sums over
    steps, layers and directions)."""
    for i, (a, b) in enumerate(zip(got, want)):
        scale = max(1.0, b.abs().max().item())
        assert torch.isfinite(a).all(), (names[i] if names else i)
        name = names[i] if names else f"output {i}"
        torch.testing.assert_close(a.double(), b.double(), atol=tol * scale, rtol=tol,
                                   msg=lambda m: f"{name}: {m}")


def _compare(m, x, lengths=None, tol=1e-5, ref=None):
    ref = _reference(m) if ref is None else ref
    outs, grads = _run(m, x, lengths)
    outs64, grads64 = _run(ref, x.double(), lengths)
    _assert_matches(outs, outs64, tol=tol)
    _assert_matches(grads, grads64, [n for n, _ in m.named_parameters()], tol=tol)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", NORMS)
def test_hidden_512_stacked_bidirectional_packed(mode, norm):
    """2 layers, bidirectional, hidden 512, an unsorted packed batch: outputs, states and every
    parameter gradient against the float64 readable loop (torch's op for norm="none"). Batch
    norm over 2 or 3 running examples amplifies float32 rounding (a unit whose values nearly agree
    is divided by its tiny spread): its batch keeps 6 examples running at every step."""
    torch.manual_seed(0)
    m = _randomize(getattr(L, mode)(16, 512, num_layers=2, bidirectional=True, norm=norm))
    lengths = torch.tensor([5, 7, 2, 6] if norm != "batch" else [7, 3, 7, 7, 5, 7, 7, 7])
    _compare(m, torch.randn(7, len(lengths), 16), lengths, tol=3e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_regularizers_on_fused_equals_readable_loop(mode, norm):
    """recurrent_dropout, zoneout and DropConnect in training, 2 layers, lengths: the module's
    path and the readable loop draw the same masks from the same generator state, so they
    compute the same function (float32 both)."""
    kw = dict(recurrent_dropout=0.25, zoneout=0.1, dropconnect=0.3)
    torch.manual_seed(0)
    m = _randomize(getattr(L, mode)(8, 64, num_layers=2, norm=norm, **kw))
    ref = copy.deepcopy(m)
    ref.use_fused = False
    # batch norm over 2 or 3 running examples is ill-conditioned (see above): 4 run at every step
    x, lengths = torch.randn(12, 8, 8), torch.tensor([12, 3, 12, 7, 12, 1, 9, 12])
    torch.manual_seed(1)
    outs, grads = _run(m, x, lengths)
    torch.manual_seed(1)
    outs_r, grads_r = _run(ref, x, lengths)
    _assert_matches(outs, outs_r, tol=1e-5)
    _assert_matches(grads, grads_r, [n for n, _ in m.named_parameters()], tol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", NORMS)
def test_cells_regularized_over_a_sequence(mode, norm):
    """The cells stepped over a sequence with their regularizers on (recurrent dropout and
    DropConnect masks held across steps, zoneout's drawn each step): the cell's path against its
    readable step (``use_fused = False``), which draws the same masks from the same generator
    state (float32 both)."""
    kw = dict(recurrent_dropout=0.25, zoneout=0.1) if mode != "RNN" else dict(zoneout=0.1)
    torch.manual_seed(0)
    cell = _randomize(getattr(L, mode + "Cell")(8, 96, norm=norm, dropconnect=0.3, **kw))
    ref = copy.deepcopy(cell)
    ref.use_fused = False
    x = torch.randn(7, 5, 8)

    def run(c, x):
        c.reset_dropout_masks()
        torch.manual_seed(2)
        hx, outs = None, []
        for t in range(x.shape[0]):
            if norm == "batch":
                hx = c(x[t], hx, time_step=t)
            else:
                hx = c(x[t], hx)
            outs.append(hx[0] if isinstance(hx, tuple) else hx)
        out = torch.stack(outs)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum()
        return [out.detach()], list(torch.autograd.grad(loss, list(c.parameters())))

    outs, grads = run(cell, x)
    outs_r, grads_r = run(ref, x)
    _assert_matches(outs, outs_r, tol=1e-5)
    _assert_matches(grads, grads_r, [n for n, _ in cell.named_parameters()], tol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_long_tailed_unsorted_lengths_every_batch(mode):
    """Lengths 5..400 in one unsorted batch, a new length pattern every batch, padded and packed
    (enforce_sorted=False): fused float32 against the float64 readable loop (the LSTM with
    recurrent-term gains 0.5, ``_contracting``)."""
    torch.manual_seed(0)
    m = _contracting(_randomize(getattr(L, mode)(8, 32, num_layers=2, norm="layer")))
    ref = _reference(m)
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([173, 5, 400, 58, 311, 9])
    _compare(m, torch.randn(400, 6, 8, generator=g), lengths, tol=3e-5, ref=ref)
    for T, lengths in ((37, None), (23, torch.tensor([3, 23, 17, 1, 23, 8])), (12, None)):
        _compare(m, torch.randn(T, 6, 8, generator=g), lengths, tol=3e-5, ref=ref)


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_encoder_decoder_graphs_alive_together(norm):
    """An encoder's final state feeds a decoder; both graphs alive in one backward, lengths
    changing every batch: every parameter's gradient against the float64 readable loops."""
    torch.manual_seed(0)
    enc = _randomize(L.LSTM(8, 128, num_layers=2, norm=norm), 1)
    dec = _randomize(L.LSTM(8, 128, num_layers=2, norm=norm), 2)
    enc64, dec64 = _reference(enc), _reference(dec)

    def step(e, d, src, tgt, lengths):
        _, state = e(pack_padded_sequence(src, lengths, enforce_sorted=False))
        out, _ = d(tgt, state)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum()
        params = [*e.parameters(), *d.parameters()]
        return [out.detach()], list(torch.autograd.grad(loss, params))

    g = torch.Generator().manual_seed(0)
    for T in (30, 21, 34):
        src, tgt = torch.randn(T, 6, 8, generator=g), torch.randn(T // 2, 6, 8, generator=g)
        lengths = torch.randint(1, T + 1, (6,), generator=g)
        lengths[:4] = T  # 4 examples running at every step (batch norm's conditioning, above)
        outs, grads = step(enc, dec, src, tgt, lengths)
        outs64, grads64 = step(enc64, dec64, src.double(), tgt.double(), lengths)
        # float32 gradients of two 2-layer LSTMs over ~45 steps: within ~1e-4 of their scale
        # (batch norm over 4 to 6 examples: ~5e-4; the readable loop in float32 ~2e-4)
        _assert_matches(outs, outs64, tol=1e-4)
        _assert_matches(grads, grads64, tol=2e-4 if norm == "layer" else 1e-3)


@pytest.mark.parametrize("mode", MODES)
def test_truncated_bptt_with_carried_states(mode):
    """Truncated BPTT: chunks of one long sequence, the state carried (detached) from chunk to
    chunk, each chunk's graph alive until the next chunk ran: the chunks' outputs equal one
    pass over the whole sequence, and each chunk's gradients equal the float64 loop's."""
    torch.manual_seed(0)
    m = _randomize(getattr(L, mode)(8, 128, num_layers=2, norm="layer"))
    ref = _reference(m)
    x = torch.randn(60, 4, 8)
    with torch.no_grad():
        whole = m(x)[0]
    hx, hx64, outs, pending = None, None, [], None
    for lo, hi in ((0, 17), (17, 40), (40, 60)):
        out, state = m(x[lo:hi]) if hx is None else m(x[lo:hi], hx)
        if pending is not None:  # the previous chunk's graph was alive while this one ran
            pending.backward()
        pending = (out * out).sum()
        got = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(),
                                  list(m.parameters()), retain_graph=True)
        out64, state64 = ref(x[lo:hi].double()) if hx64 is None else ref(x[lo:hi].double(), hx64)
        want = torch.autograd.grad(
            (out64 * torch.linspace(-1, 1, out64.numel(), dtype=torch.float64)
             .view_as(out64)).sum(), list(ref.parameters()))
        _assert_matches([out.detach(), *got], [out64.detach(), *want], tol=3e-5)
        outs.append(out.detach())
        detach = (lambda s: tuple(t.detach() for t in s)) if mode == "LSTM" else \
            (lambda s: s.detach())
        hx, hx64 = detach(state), detach(state64)
    pending.backward()
    torch.testing.assert_close(torch.cat(outs), whole, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("norm", NORMS)
def test_inference_mode_and_eval_at_changing_shapes(mode, norm):
    """Eval (running statistics for norm="batch") under torch.inference_mode and no_grad, the
    shape changing every call, padded and packed: the float64 readable loop's outputs."""
    torch.manual_seed(0)
    m = _randomize(getattr(L, mode)(8, 64, num_layers=2, bidirectional=True, norm=norm))
    for T in (12, 30, 7):  # a few training batches give norm="batch" its running statistics
        m(torch.randn(T, 6, 8))[0].sum().backward()
    m.eval()
    ref = _reference(m)
    g = torch.Generator().manual_seed(1)
    for i, (T, B) in enumerate(((30, 3), (9, 17), (25, 1), (20, 8))):
        x = torch.randn(T, B, 8, generator=g)
        lengths = torch.randint(1, T + 1, (B,), generator=g) if i % 2 else None
        inp = x if lengths is None else pack_padded_sequence(x, lengths, enforce_sorted=False)
        inp64 = x.double() if lengths is None else \
            pack_padded_sequence(x.double(), lengths, enforce_sorted=False)
        with torch.inference_mode() if i < 2 else torch.no_grad():
            out, _ = m(inp)
            out64, _ = ref(inp64)
        out = out.data if lengths is not None else out
        out64 = out64.data if lengths is not None else out64
        torch.testing.assert_close(out.double(), out64, atol=5e-5, rtol=1e-5)


def test_two_threads_train_two_models():
    """Two Python threads, each training its own model (Adam, lengths changing every batch):
    each ends with the parameters it reaches when trained alone."""
    models = {("LSTM", 1): _randomize(L.LSTM(8, 128, num_layers=2, norm="layer"), 1),
              ("GRU", 2): _randomize(L.GRU(8, 128, num_layers=2, norm="layer"), 2)}

    def train(mode, seed):
        g = torch.Generator().manual_seed(seed)
        m = copy.deepcopy(models[mode, seed])
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        for _ in range(5):
            T = int(torch.randint(5, 40, (1,), generator=g))
            lengths = torch.randint(1, T + 1, (4,), generator=g)
            lengths[0] = T
            x = torch.randn(T, 4, 8, generator=g)
            out = m(pack_padded_sequence(x, lengths, enforce_sorted=False))[0].data
            opt.zero_grad()
            out.pow(2).mean().backward()
            opt.step()
        return [p.detach().clone() for p in m.parameters()]

    jobs = {("LSTM", 1): None, ("GRU", 2): None}
    alone = {job: train(*job) for job in jobs}
    errors = []

    def target(job):
        try:
            jobs[job] = train(*job)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=target, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for job in jobs:
        for a, b in zip(jobs[job], alone[job]):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.slow
def test_a_5000_step_sequence():
    """One 5,000-step sequence: the LN-LSTM's outputs and the LN-GRU's outputs and gradients
    against the float64 loop. (The LN-LSTM's gradient at torch's initialization grows with T
    until float32 overflows: docs/rnn.md, "Long sequences"; its forward is tested here.)"""
    torch.manual_seed(0)
    T = 5000
    x = torch.randn(T, 1, 4)
    lstm = _contracting(_randomize(L.LSTM(4, 16, norm="layer")))
    with torch.no_grad():
        out, (h, c) = lstm(x)
        out64, (h64, c64) = _reference(lstm)(x.double())
    _assert_matches([out, h, c], [out64, h64, c64], tol=3e-5)
    gru = _randomize(L.GRU(4, 16, norm="layer"))
    outs, grads = _run(gru, x)
    outs64, grads64 = _run(_reference(gru), x.double())
    _assert_matches(outs, outs64)
    _assert_matches(grads, grads64, [n for n, _ in gru.named_parameters()], tol=1e-4)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc (Linux)")
def test_memory_stops_growing_after_warm_up():
    """60 training batches whose shapes change every batch (lengths, padded and packed, batch
    size), cycling through a set of shapes: the pool's bytes never pass their cap and stop growing
    once every shape was seen, and the resident memory of the last 40 batches stays within the
    first 20's peak plus 10%."""
    torch.manual_seed(0)
    m = L.LSTM(16, 128, num_layers=2, norm="layer")
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    shapes = [(40, 16), (23, 32), (61, 8), (35, 24), (50, 16)]
    kept, rss = [], []
    for i in range(60):
        T, B = shapes[i % len(shapes)]
        x = torch.randn(T, B, 16, generator=g)
        if i % 2:
            lengths = torch.randint(1, T + 1, (B,), generator=g)
            lengths[0] = T
            out = m(pack_padded_sequence(x, lengths, enforce_sorted=False))[0].data
        else:
            out = m(x)[0]
        opt.zero_grad()
        out.pow(2).mean().backward()
        opt.step()
        kept.append(sum(b.numel() * b.element_size() for b in common._WORKSPACE._bufs))
        rss.append(_rss_mb())
    assert max(kept) <= common.WORKSPACE_BYTES
    assert max(kept[20:]) <= max(kept[:20])
    assert max(rss[20:]) <= 1.1 * max(rss[:20]), (max(rss[:20]), max(rss[20:]))


def test_adam_norm_none_tracks_torch_lstm():
    """50 Adam updates of layernorm.LSTM(norm="none") and of torch.nn.LSTM from the same weights,
    on batches of changing lengths: the parameters stay together."""
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(8, 32, num_layers=2, bidirectional=True)
    ours = L.LSTM.from_torch(theirs, norm="none")
    opts = [torch.optim.Adam(m.parameters(), lr=3e-3) for m in (theirs, ours)]
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        T = int(torch.randint(3, 15, (1,), generator=g))
        lengths = torch.randint(1, T + 1, (5,), generator=g)
        lengths[0] = T
        x, y = torch.randn(T, 5, 8, generator=g), torch.randn(T, 5, 64, generator=g)
        for m, opt in zip((theirs, ours), opts):
            out = pad_packed_sequence(m(pack_padded_sequence(x, lengths,
                                                             enforce_sorted=False))[0],
                                      total_length=T)[0]
            opt.zero_grad()
            (out - y).pow(2).mean().backward()
            opt.step()
    named = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        torch.testing.assert_close(named[name], p, atol=1e-5, rtol=1e-4, msg=name)
    assert any((p - q).abs().max() > 1e-3 for p, q in
               zip(theirs.parameters(), torch.nn.LSTM(8, 32, 2, bidirectional=True).parameters()))
