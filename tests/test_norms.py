"""Modules, make_norm / norm_block, the paper's contrast between LN and BN, and bad input."""
import pytest
import torch
from torch import nn

import layernorm as L
from tests.conftest import DTYPES, TOL


def test_layernorm_is_drop_in_for_torch():
    theirs = nn.LayerNorm((7, 16), eps=1e-6)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours = L.LayerNorm((7, 16), eps=1e-6)
    ours.load_state_dict(theirs.state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x = torch.randn(3, 7, 16)
    torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)
    assert repr(ours).replace("LayerNorm", "") == repr(theirs).replace("LayerNorm", "")
    for kw in ({"elementwise_affine": False}, {"bias": False}):
        a, b = L.LayerNorm(16, **kw), nn.LayerNorm(16, **kw)
        assert a.state_dict().keys() == b.state_dict().keys()


def test_rmsnorm_state_dict_and_output_match_torch():
    theirs, ours = nn.RMSNorm(32, eps=1e-5), L.RMSNorm(32)
    with torch.no_grad():
        theirs.weight.normal_()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(4, 32)
    torch.testing.assert_close(ours(x), theirs(x))


def test_conv_layer_norm_equals_groupnorm_one_group():
    ours, theirs = L.ConvLayerNorm(6), nn.GroupNorm(1, 6)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 6, 5, 5)
    torch.testing.assert_close(ours(x), theirs(x))
    assert "6, eps=1e-05" in repr(ours)


@pytest.mark.parametrize("shape", [(8, 5), (8, 5, 7), (4, 5, 3, 3)])
def test_batchnorm_matches_torch_train_and_eval(shape):
    torch_bn = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d}[len(shape)](5)
    ours = L.BatchNorm(5)
    ours.load_state_dict(torch_bn.state_dict())
    for _ in range(3):
        x = torch.randn(shape) * 3 + 1
        torch.testing.assert_close(ours(x), torch_bn(x))
    torch.testing.assert_close(ours.running_mean, torch_bn.running_mean)
    torch.testing.assert_close(ours.running_var, torch_bn.running_var)
    assert ours.num_batches_tracked == torch_bn.num_batches_tracked == 3
    ours.eval(), torch_bn.eval()
    x = torch.randn(shape)
    torch.testing.assert_close(ours(x), torch_bn(x))
    torch_bn.load_state_dict(ours.state_dict())


def test_batchnorm_unbiased_uses_n_minus_one():
    x = torch.randn(4, 3, dtype=torch.float64)
    y = L.BatchNorm(3, unbiased=True, dtype=torch.float64)(x)
    expect = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=True) + 1e-5)
    torch.testing.assert_close(y, expect)


def test_batchnorm_single_example_error_names_layer_norm():
    bn = L.BatchNorm(16)
    with pytest.raises(ValueError, match=r"batch size 1.*layer norm"):
        bn(torch.randn(1, 16))
    bn.eval()
    assert bn(torch.randn(1, 16)).shape == (1, 16)  # eval uses running statistics: fine


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_example_independent_of_batch(dtype):
    """Paper section 3: LN statistics are per example; BN's depend on the batch."""
    atol, _ = TOL[dtype]
    x0 = torch.randn(1, 64).to(dtype)
    rest_a, rest_b = torch.randn(127, 64).to(dtype), (torch.randn(127, 64) * 5 + 2).to(dtype)
    ln = L.make_norm("layer", 64).to(dtype)
    alone = ln(x0)
    in_a, in_b = ln(torch.cat([x0, rest_a]))[:1], ln(torch.cat([x0, rest_b]))[:1]
    assert torch.equal(in_a, in_b) and torch.equal(alone, in_a)
    bn = L.make_norm("batch", 64).to(dtype)
    out_a, out_b = bn(torch.cat([x0, rest_a]))[:1], bn(torch.cat([x0, rest_b]))[:1]
    assert (out_a.double() - out_b.double()).abs().max() > 100 * atol


def test_conv_layer_norm_example_independent_of_batch():
    x0 = torch.randn(1, 4, 6, 6)
    ln = L.make_norm("layer", 4, conv=True)
    torch.testing.assert_close(ln(torch.cat([x0, torch.randn(5, 4, 6, 6) * 9]))[:1], ln(x0))


@pytest.mark.parametrize("name", L.NORMS)
def test_every_parameter_gets_a_finite_gradient(name):
    for layer, x in ((nn.Linear(10, 12), torch.randn(6, 10)),
                     (nn.Conv2d(3, 4, 3), torch.randn(6, 3, 8, 8))):
        if name == "rms" and isinstance(layer, nn.Conv2d):
            continue
        block = L.norm_block(layer, name)
        block(x).pow(2).sum().backward()
        for pname, p in block.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), pname


def test_weight_norm_reparameterizes_and_is_invariant_to_weight_rescaling():
    lin = L.weight_norm(nn.Linear(5, 3))
    g, v = lin.parametrizations.weight.original0, lin.parametrizations.weight.original1
    w = lin.weight
    torch.testing.assert_close(w.norm(dim=1, keepdim=True), g)
    x = torch.randn(4, 5)
    y = lin(x)
    with torch.no_grad():
        v.mul_(torch.tensor([[2.0], [0.5], [7.0]]))  # w_i -> d_i w_i: output unchanged
    torch.testing.assert_close(lin(x), y)
    with pytest.raises(ValueError, match="weight matrix"):
        L.weight_norm(nn.LayerNorm(3))


def test_make_norm_by_name():
    assert isinstance(L.make_norm("layer", 8), L.LayerNorm)
    assert isinstance(L.make_norm("layer", 8, conv=True), L.ConvLayerNorm)
    assert isinstance(L.make_norm("batch", 8), L.BatchNorm)
    assert L.make_norm("batch", 8, unbiased=True).unbiased
    assert isinstance(L.make_norm("rms", 8), L.RMSNorm)
    assert isinstance(L.make_norm("none", 8), nn.Identity)
    with pytest.raises(ValueError, match=r"unknown norm 'group'; expected one of"):
        L.make_norm("group", 8)
    with pytest.raises(ValueError, match="nn.Linear or nn.Conv layer, received ReLU"):
        L.norm_block(nn.ReLU(), "layer")


def test_layernorm_gradcheck_and_module_dtypes():
    m = L.LayerNorm(5, dtype=torch.float64)
    with torch.no_grad():
        m.weight.normal_()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(m, (x,))
    bn = L.BatchNorm(5, dtype=torch.float64)
    assert torch.autograd.gradcheck(bn, (x,))


@pytest.mark.parametrize("module, x, pattern", [
    (L.LayerNorm(256), torch.randn(3, 7, 255), r"last 1 dim\(s\) are \(256,\).*received shape \(3, 7, 255\)"),
    (L.LayerNorm(256), torch.randn(0, 256), r"empty tensor of shape \(0, 256\)"),
    (L.LayerNorm(4), torch.ones(2, 4, dtype=torch.long), r"floating-point.*torch.int64.*x.float\(\)"),
    (L.BatchNorm(8), torch.randn(4, 6), r"\(N, 8, \.\.\.\).*received shape \(4, 6\) \(6 channels\)"),
    (L.BatchNorm(8), torch.randn(0, 8), r"empty tensor"),
    (L.ConvLayerNorm(3), torch.randn(2, 4, 5, 5), r"\(N, 3, \.\.\.\).*4 channels"),
    (L.RMSNorm(8), torch.randn(2, 7), r"received shape \(2, 7\)"),
    (L.RMSNorm(8), torch.ones(2, 8, dtype=torch.int32), r"torch.int32"),
])
def test_bad_input_errors_say_expected_received_fix(module, x, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern) as info:
        module(x)
    msg = str(info.value)
    assert "expected" in msg and "received" in msg


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.cuda
def test_norms_on_cuda_match_cpu():
    x = torch.randn(4, 8, 6, 6)
    for name in ("layer", "batch"):
        cpu = L.make_norm(name, 8, conv=True)
        gpu = L.make_norm(name, 8, conv=True).cuda()
        torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x), atol=1e-5, rtol=1e-5)
    for dtype in (torch.float16, torch.bfloat16):
        y = L.functional.layer_norm(x.cuda().to(dtype), (8, 6, 6))
        assert y.dtype == dtype and torch.isfinite(y).all()
