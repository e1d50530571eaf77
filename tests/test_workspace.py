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
