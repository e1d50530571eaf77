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
