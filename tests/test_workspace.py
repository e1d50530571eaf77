"""The CPU workspace pool of the whole-sequence kernels under the shapes of real training: lengths
that change every batch, several graphs alive at once, a pool that fills up and must evict."""

import threading

import pytest
import torch

import layernorm as L
from layernorm.ops import common


@pytest.fixture
def small_pool(monkeypatch):
    """A pool of 256 KB, so that a few small batches fill it and eviction runs."""
    monkeypatch.setattr(common, "WORKSPACE_BYTES", 256 << 10)
    common.release_workspace()
    yield
    common.release_workspace()


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_eviction_with_live_graphs_and_changing_lengths(small_pool, norm):
    """Evicting a free buffer while an older one is held by a live graph must not compare tensors
    (``list.remove`` did, by ``==``: 'Boolean value of Tensor ... ambiguous' or a size mismatch)."""
    torch.manual_seed(0)
    m = L.LSTM(8, 32, num_layers=2, norm=norm)
    ref = L.LSTM(8, 32, num_layers=2, norm=norm)
    ref.load_state_dict(m.state_dict())
    alive = []
    for T in (30, 26, 34, 28, 30, 22, 40, 26):
        x = torch.randn(T, 4, 8)
        out = m(x)[0]
        alive.append(out)  # this graph's saved buffers stay in use
        if len(alive) > 2:
            alive.pop(0)
        out.sum().backward()  # retain nothing: the next batch must reuse or evict
        common.WORKSPACE_BYTES, saved = 0, common.WORKSPACE_BYTES
        try:  # the same batch with no pool at all gives the same output, bit for bit
            torch.testing.assert_close(ref(x)[0], out.detach(), rtol=0, atol=0)
        finally:
            common.WORKSPACE_BYTES = saved


def test_pool_stays_bounded_and_unique(small_pool):
    m = L.LSTM(8, 64, norm="layer")
    for T in range(5, 60, 3):
        m(torch.randn(T, 8, 8))[0].sum().backward()
    bufs = common._WORKSPACE._bufs
    assert sum(b.numel() * b.element_size() for b in bufs) <= common.WORKSPACE_BYTES
    assert len({id(b) for b in bufs}) == len(bufs)


def test_two_threads_share_the_pool(small_pool):
    errors = []

    def train(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            m = L.LSTM(8, 32, norm="layer")
            for T in (20, 35, 12, 41, 17, 29):
                m(torch.randn(T, 3, 8, generator=g))[0].sum().backward()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=train, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _poison_free_buffers():
    """Fill every free pooled buffer with NaN: a kernel that read a row it did not write would
    then return NaN instead of a plausible stale value."""
    ws = common._WORKSPACE
    with ws._lock:
        for buf in ws._bufs:
            if ws._free(buf):
                buf.fill_(float("nan"))


def _step(m, x, lengths=None):
    """Output and every parameter gradient of one fwd+bwd (a fixed weighted loss)."""
    from torch.nn.utils.rnn import pack_padded_sequence
    inp = x if lengths is None else pack_padded_sequence(x, lengths, enforce_sorted=False)
    out = m(inp)[0]
    out = out if lengths is None else out.data
    w = torch.linspace(-1, 1, out.numel()).view_as(out)
    grads = torch.autograd.grad((out * w).sum(), list(m.parameters()))
    return [out.detach(), *grads]


@pytest.mark.parametrize("cls,norm", [("LSTM", "layer"), ("GRU", "layer"), ("LSTM", "batch"),
                                      ("GRU", "batch")])
def test_no_stale_data_after_other_shapes_used_the_pool(cls, norm):
    """A result computed after other shapes (padded and packed, bigger and smaller) have used the
    pool, with every free buffer then filled with NaN, equals the first result bit for bit."""
    common.release_workspace()
    torch.manual_seed(0)
    m = getattr(L, cls)(6, 16, num_layers=2, norm=norm, max_length=40)
    m.eval() if norm == "batch" else None  # eval: the running statistics do not move
    x, lengths = torch.randn(12, 5, 6), torch.tensor([12, 3, 9, 1, 7])
    first = _step(m, x), _step(m, x, lengths)
    for T, B in ((30, 9), (5, 2), (12, 5)):
        _step(m, torch.randn(T, B, 6))
        _step(m, torch.randn(T, B, 6), torch.randint(1, T + 1, (B,)))
        _poison_free_buffers()
        again = _step(m, x), _step(m, x, lengths)
        for run_first, run_again in zip(first, again):
            for a, b in zip(run_first, run_again):
                assert torch.equal(a, b), (T, B)


def test_a_buffer_is_never_handed_out_while_a_view_of_it_lives():
    """The pool's contract, directly: a buffer comes back only when nothing but the pool holds
    its storage, whatever view (an offset slice, a reshape) still points into it."""
    ws = common._Workspace()
    like = torch.empty(0)
    a = ws.get((4, 8), like=like)
    held = a[1:, 2:]  # a saved tensor that points into the middle of the buffer
    del a
    b = ws.get((4, 8), like=like)
    assert b.untyped_storage().data_ptr() != held.untyped_storage().data_ptr()
    del held
    c = ws.get((4, 8), like=like)  # now free again: reused
    assert len(ws._bufs) == 2 and any(c.data_ptr() == buf.data_ptr() for buf in ws._bufs)
    assert b.data_ptr() != c.data_ptr()


@pytest.mark.parametrize("cls,norm", [("LSTM", "layer"), ("GRU", "layer"), ("LSTM", "batch")])
def test_live_graph_keeps_its_buffers_while_same_shapes_run(small_pool, cls, norm):
    """A graph kept alive (its backward not yet run) while forwards and backwards of the same
    shape run gives the gradients it gives alone: no other call wrote into its saved buffers."""
    torch.manual_seed(0)
    m = getattr(L, cls)(6, 24, norm=norm)
    x = torch.randn(10, 4, 6)
    alone = _step(m, x)
    out = m(x)[0]  # kept
    for scale in (0.5, 2.0, -1.0):
        _step(m, scale * x)
    w = torch.linspace(-1, 1, out.numel()).view_as(out)
    grads = torch.autograd.grad((out * w).sum(), list(m.parameters()))
    for a, b in zip(alone, [out.detach(), *grads]):
        assert torch.equal(a, b)


def test_pool_bounded_with_live_graphs_of_changing_shapes(small_pool):
    """Graphs of many shapes alive at once: the pool never keeps more than WORKSPACE_BYTES (what
    does not fit is a plain allocation, freed with its graph)."""
    m = L.LSTM(8, 48, num_layers=2, norm="layer")
    alive = []
    for T in range(5, 70, 4):
        alive.append(m(torch.randn(T, 6, 8))[0])
        bufs = common._WORKSPACE._bufs
        assert sum(b.numel() * b.element_size() for b in bufs) <= common.WORKSPACE_BYTES
    for out in alive:
        out.sum().backward()


def test_two_threads_get_the_results_of_one(small_pool):
    """Two Python threads training two models through one pool compute what each computes alone,
    bit for bit."""
    def run(seed):
        g = torch.Generator().manual_seed(seed)
        m = L.LSTM(8, 32, num_layers=2, norm="layer") if seed % 2 else L.GRU(8, 32, norm="layer")
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        return [_step(m, torch.randn(T, 3, 8, generator=g)) for T in (20, 35, 12, 41, 17, 29)]

    alone = {s: run(s) for s in (1, 2)}
    got, errors = {}, []

    def target(s):
        try:
            got[s] = run(s)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=target, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for s in (1, 2):
        for step_a, step_b in zip(alone[s], got[s]):
            assert all(torch.equal(a, b) for a, b in zip(step_a, step_b))


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_the_users_programs_train_twenty_batches(small_pool, norm):
    """The program that crashed on its third batch (a 2-layer LN-LSTM, lengths changing every
    batch), and an encoder feeding a decoder (the encoder's graph alive while the decoder runs),
    scaled down to a pool that fills in a few batches: 20 batches each, the losses finite."""
    torch.manual_seed(0)
    m = L.LSTM(4, 16, num_layers=2, norm=norm)
    enc = L.LSTM(4, 16, num_layers=2, norm=norm)
    dec = L.LSTM(4, 16, num_layers=2, norm=norm)
    for i in range(20):
        T = (30, 26, 34, 28)[i % 4] + i % 3
        loss = m(torch.randn(T, 4, 4))[0].sum()
        loss.backward()
        _, state = enc(torch.randn(T, 4, 4))
        out, _ = dec(torch.randn(T // 2 + 1, 4, 4), state)
        loss2 = out.pow(2).mean()
        loss2.backward()
        assert torch.isfinite(loss) and torch.isfinite(loss2)


def test_pool_serves_shorter_batches_from_the_buffers_of_a_longer_one():
    """Lengths change every batch in real training: once the longest batch has run, shorter ones
    take views of its free buffers instead of adding buffers of their own shapes (a pool keyed by
    exact shape grew by one set of buffers per length, up to its cap)."""
    common.release_workspace()
    m = L.LSTM(8, 32, num_layers=2, norm="layer")
    m(torch.randn(40, 6, 8))[0].sum().backward()
    ws = common._WORKSPACE
    held = {id(b) for b in ws._bufs}
    for T in (35, 20, 38, 12, 40, 27):
        m(torch.randn(T, 6, 8))[0].sum().backward()
        assert {id(b) for b in ws._bufs} == held, T


def test_scoring_one_batch_larger_than_the_pool_after_training(small_pool):
    """A BN-LSTM trained on small batches, then scoring one packed batch whose buffers alone pass
    the pool's cap (2,500 reviews at once, scaled down), with autograd on and a training graph
    still alive: no error, and the scores of the batch without any pool."""
    from torch.nn.utils.rnn import pack_padded_sequence
    torch.manual_seed(0)
    m = L.LSTM(8, 16, norm="batch", max_length=40)
    kept = []
    for T in (20, 31, 17):
        out = m(torch.randn(T, 6, 8))[0]
        out.pow(2).mean().backward(retain_graph=not kept)
        kept = kept or [out]  # the first training graph stays alive, its buffers first in line
    m.eval()
    x, lengths = torch.randn(40, 300, 8), torch.randint(1, 41, (300,))
    scores = m(pack_padded_sequence(x, lengths, enforce_sorted=False))[1][0]
    common.WORKSPACE_BYTES, cap = 0, common.WORKSPACE_BYTES
    try:
        alone = m(pack_padded_sequence(x, lengths, enforce_sorted=False))[1][0]
    finally:
        common.WORKSPACE_BYTES = cap
    assert torch.equal(scores, alone)
    assert kept


@pytest.mark.parametrize("cls,norm", [("LSTM", "layer"), ("GRU", "layer"), ("LSTM", "batch")])
def test_the_input_term_and_its_gradient_come_from_the_pool(monkeypatch, cls, norm):
    """The module's input term W_x x (all steps) and the operator's gradient of it are pooled
    buffers (a fresh (T, B, G) buffer costs a page fault per 4 KB at first touch); a user's own
    call of ``input_linear`` and the gradient of a user's own input term are plain tensors."""
    from layernorm.ops import gemm
    from layernorm.rnn import fused
    common.release_workspace()
    seen = {"xw": [], "grad": []}
    forward = gemm._NativeLinear.forward

    def spy_forward(ctx, x, w, pooled):
        y = forward(ctx, x, w, pooled)
        seen["xw"].append(common._WORKSPACE.holds(y))
        return y

    grad_buffer = common.grad_buffer

    def spy_buffer(xg, zero, bf16=False):
        buf = grad_buffer(xg, zero, bf16)
        seen["grad"].append(common._WORKSPACE.holds(buf))
        return buf
    monkeypatch.setattr(gemm._NativeLinear, "forward", staticmethod(spy_forward))
    monkeypatch.setattr(common, "grad_buffer", spy_buffer)
    torch.manual_seed(0)
    m = getattr(L, cls)(6, 24 if cls == "LSTM" else 32, norm=norm)  # (G: whole panels)
    for T in (10, 14):
        _step(m, torch.randn(T, 4, 6))
    assert seen["xw"] == [True, True] and seen["grad"][-2:] == [True, True], seen

    x, w = torch.randn(10, 4, 6), torch.randn(96, 6)
    assert not common._WORKSPACE.holds(gemm.input_linear(x, w))
    if cls == "LSTM" and norm == "layer":  # the operator called on the user's own input term
        xg = torch.randn(10, 4, 96, requires_grad=True)
        h0, c0 = torch.zeros(4, 24), torch.zeros(4, 24)
        out = fused.ln_lstm_sequence(xg, h0, c0, 0.1 * torch.randn(96, 24), torch.ones(96),
                                 torch.zeros(96), torch.ones(24), torch.zeros(24))[0]
        out.sum().backward()
        assert xg.grad is not None and not common._WORKSPACE.holds(xg.grad)
