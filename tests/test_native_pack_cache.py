"""The cache of packed weights (``ops.gemm._cached_pack``): a cached pack is reused only while
its weight holds the same values. torch's version counter alone would not tell: an edit through
``w.data`` leaves it unchanged (checked here), so every reuse compares the values."""
import pytest
import torch

import layernorm
from layernorm.ops import native

pytestmark = pytest.mark.skipif(native.load() is None, reason="no C compiler: no C kernels")


def test_the_version_counter_misses_edits_through_data():
    w = torch.nn.Parameter(torch.randn(4, 3))
    before = w._version
    w.data.add_(1)
    assert w._version == before  # why the cache compares values


@pytest.mark.parametrize("edit", ["no_grad", "data", "data_assign", "load_state_dict"])
def test_an_updated_weight_is_packed_again(edit):
    """Inference (the panels of W_x and W_hh cached), then the weights changed in place each way
    a user changes them: the next call computes with the new values, as a fresh module does."""
    torch.manual_seed(0)
    m = layernorm.LSTM(5, 8, norm="layer").eval()
    fresh = layernorm.LSTM(5, 8, norm="layer").eval()
    x = torch.randn(4, 3, 5)
    with torch.inference_mode():
        m(x)
        m(x)  # from the cache
    new = {k: v + 0.5 for k, v in m.state_dict().items()}
    if edit == "no_grad":
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.copy_(new[name])
    elif edit == "data":
        for name, p in m.named_parameters():
            p.data.copy_(new[name])
    elif edit == "data_assign":
        for name, p in m.named_parameters():
            p.data = new[name].clone()
    else:
        m.load_state_dict(new)
    fresh.load_state_dict(new)
    with torch.inference_mode():
        out, _ = m(x)
        expected, _ = fresh(x)
    assert torch.equal(out, expected)


def _panels_by_definition(w, width, transposed):
    """panels[p, k, c] = w[p * width + c, k] (of w.t() where transposed), zero columns padding."""
    a = w.t() if transposed else w
    rows, k = a.shape
    out = torch.zeros(-(-rows // width), k, width, dtype=w.dtype)
    for r in range(rows):
        out[r // width, :, r % width] = a[r]
    return out


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("g, k", [(1, 1), (15, 17), (16, 16), (17, 33), (31, 15), (32, 256),
                                  (33, 1), (200, 200), (1024, 256), (1000, 130)])
def test_the_c_packer_writes_the_panels_layout(g, k, transposed):
    """``_panels`` through the C kernels' ``pack_panels`` (16 x 16 blocks transposed in registers,
    the edges one float at a time, zeros padding the last panel) against the layout's definition,
    with a stale buffer full of NaN to write over."""
    from layernorm.ops import gemm
    lib = native.load()
    width = lib.panel_width()
    w = torch.nn.Parameter(torch.randn(g, k))
    first = gemm._panels(w, width, transposed)
    ptr = first.data_ptr()
    first.fill_(float("nan"))
    del first
    with torch.no_grad():
        w.mul_(-1.5)
    packed = gemm._panels(w, width, transposed)
    assert packed.data_ptr() == ptr  # the stale entry's buffer, written over
    assert torch.equal(packed, _panels_by_definition(w.detach(), width, transposed))


def test_a_stale_pack_still_held_is_not_written_over():
    """A caller still holding the panels of the weight's old values (another thread's call in
    flight) keeps them: the repack of the changed weight goes to a new buffer; once nothing but
    the cache holds a stale pack, its buffer is reused."""
    from layernorm.ops import gemm
    width = native.load().panel_width()
    w = torch.nn.Parameter(torch.randn(70, 40))
    held = gemm._panels(w, width)
    before = held.clone()
    with torch.no_grad():
        w.add_(1.0)
    second = gemm._panels(w, width)
    assert second.data_ptr() != held.data_ptr() and torch.equal(held, before)
    assert torch.equal(second, _panels_by_definition(w.detach(), width, False))
    ptr = second.data_ptr()
    del second
    with torch.no_grad():
        w.add_(1.0)
    third = gemm._panels(w, width)
    assert third.data_ptr() == ptr
    assert torch.equal(third, _panels_by_definition(w.detach(), width, False))
    assert torch.equal(held, before)


@pytest.mark.parametrize("transposed", [0, 1])
@pytest.mark.parametrize("g, k", [(33, 17), (64, 32), (1000, 130)])
def test_the_c_packers_check_finds_any_changed_bit(g, k, transposed):
    """``pack_panels``'s check (the cache's test that the panels still hold the weight): 0 on its
    own panels; 1 after one weight changes by one ulp, or flips its sign bit at 0, inside a
    16 x 16 block, at the edges past them and at the ends; 1 where the padding is not zero."""
    lib = native.load()
    width = lib.panel_width()
    w = torch.randn(g, k)
    w[0, 0] = 0.0
    out = torch.empty(-(-(k if transposed else g) // width), g if transposed else k, width)
    lib.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(), 0, 2)
    assert lib.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(), 1, 1) == 0
    for i, j in [(0, 0), (5, 7), (g - 1, k - 1), (g - 1, 0), (0, k - 1), (g // 2, k // 2)]:
        old = w[i, j].clone()
        w[i, j] = -0.0 if old == 0 else torch.nextafter(old, torch.tensor(float("inf")))
        assert lib.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(), 1, 1) == 1
        w[i, j] = old
    assert lib.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(), 1, 1) == 0
    rows = k if transposed else g
    if rows % width:  # the last panel's padding
        out[-1, -1, -1] = 1.0
        assert lib.pack_panels(g, k, w.data_ptr(), transposed, out.data_ptr(), 1, 1) == 1


@pytest.mark.parametrize("calls", [1, 2, 3])
def test_one_weight_changed_through_data_is_packed_again(calls):
    """An inference module whose W_hh changes in one element through ``.data`` (no version
    bump) after 1, 2 or 3 calls: the next call computes with it, as a fresh module with the same
    weights does. After one call the cache compares the weight with its panels; after more, with
    the copy that comparison made current."""
    from layernorm.ops import gemm
    torch.manual_seed(0)
    m = layernorm.LSTM(5, 40, norm="layer").eval()
    fresh = layernorm.LSTM(5, 40, norm="layer").eval()
    x = torch.randn(6, 3, 5)
    with torch.inference_mode():
        for _ in range(calls):
            before, _ = m(x)
    current = [e[4] for k, e in gemm._PACK_CACHE.items() if k[0] == id(m.weight_hh_l0)]
    assert current == [calls > 1]
    w = m.weight_hh_l0.data
    w[17, 3] = torch.nextafter(w[17, 3], torch.tensor(float("inf"))) * 1e4
    fresh.load_state_dict(m.state_dict())
    with torch.inference_mode():
        out, _ = m(x)
        expected, _ = fresh(x)
    assert not torch.equal(out, before) and torch.equal(out, expected)
