"""Modules, make_norm / norm_block, the paper's contrast between LN and BN, and bad input."""
import pytest
import torch
from torch import nn

import layernorm as L
from tests.conftest import DTYPES, TOL
from tests.reference import ref_batch_norm


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [None, 1e-5])
def test_rmsnorm_is_drop_in_for_torch(eps, dtype):
    """Same state_dict, default eps=None (the dtype's machine epsilon at call time) and output."""
    theirs, ours = nn.RMSNorm(32, eps=eps), L.RMSNorm(32, eps=eps)
    assert L.RMSNorm(32).eps is None and repr(ours) == repr(theirs)
    with torch.no_grad():
        theirs.weight.normal_()
    ours.load_state_dict(theirs.state_dict())
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    x = (torch.randn(4, 32) * 1e-3).to(dtype)  # small inputs: eps matters
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(ours(x), theirs(x), atol=atol * 2, rtol=rtol * 2)


@pytest.mark.parametrize("ours, theirs", [
    (lambda: L.LayerNorm(6), lambda: nn.LayerNorm(6)),
    (lambda: L.RMSNorm(6), lambda: nn.RMSNorm(6)),
    (lambda: L.make_norm("layer", 6), lambda: nn.LayerNorm(6)),
    (lambda: L.BatchNorm(6), lambda: nn.BatchNorm1d(6)),
])
@pytest.mark.parametrize("shape", [(0, 6), (0, 3, 6), (2, 0, 6)])
def test_empty_batch_gives_empty_output_and_grads_as_torch(ours, theirs, shape):
    a, b = ours(), theirs()
    if isinstance(a, L.BatchNorm):
        shape = shape[:-1] if len(shape) == 2 else (shape[0], 6, shape[1])
        shape = (0, 6) if len(shape) == 1 else shape
    x1, x2 = torch.randn(shape, requires_grad=True), torch.randn(shape, requires_grad=True)
    y1, y2 = a(x1), b(x2)
    assert y1.shape == y2.shape == x1.shape
    y1.sum().backward()
    y2.sum().backward()
    assert x1.grad.shape == x2.grad.shape
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad), n
    for (n, p), q in zip(a.named_buffers(), b.buffers()):
        if n != "num_batches_tracked":  # torch counts the empty batch; the statistics are kept
            assert torch.equal(p, q), n
    a.eval()
    assert a(x1).shape == x1.shape


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


class _OwnStatsBatchNorm(L.BatchNorm):
    """Takes its statistics in ``_batch_moments`` (as SyncBatchNorm does): the torch-ops path."""

    def _batch_moments(self, x):
        return super()._batch_moments(x)


@pytest.mark.parametrize("shape", [(8, 5), (4, 5, 3, 3), (2, 5)])
@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_fused_kernel_equals_torch_ops_path(shape, unbiased, momentum):
    """torch's fused kernel (the default) and the statistics helper: same outputs, gradients and
    running statistics, the unbiased variant (a rescaling of the biased one) included."""
    kw = {"unbiased": unbiased, "momentum": momentum, "dtype": torch.float64}
    fused, helper = L.BatchNorm(5, **kw), _OwnStatsBatchNorm(5, **kw)
    with torch.no_grad():
        fused.weight.normal_()
        fused.bias.normal_()
    helper.load_state_dict(fused.state_dict())
    for step in range(3):
        x = torch.randn(shape, dtype=torch.float64) * 3 + step
        g = torch.randn(shape, dtype=torch.float64)
        outs = []
        for m in (fused, helper):
            xi = x.clone().requires_grad_()
            y = m(xi)
            y.backward(g)
            outs.append((y, xi.grad))
        for a, b in zip(*outs):
            torch.testing.assert_close(a, b)
    for name in ("weight", "bias"):
        torch.testing.assert_close(getattr(fused, name).grad, getattr(helper, name).grad)
    for name, buf in fused.named_buffers():
        torch.testing.assert_close(buf, helper.get_buffer(name))
    fused.eval(), helper.eval()
    x = torch.randn(shape, dtype=torch.float64)
    torch.testing.assert_close(fused(x), helper(x))


def test_batchnorm_momentum_none_is_cumulative_average_as_torch():
    ours, theirs = L.BatchNorm(4, momentum=None), nn.BatchNorm1d(4, momentum=None)
    for _ in range(4):
        x = torch.randn(16, 4) * 2 + 1
        torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    torch.testing.assert_close(ours.running_mean, theirs.running_mean)


@pytest.mark.parametrize("momentum", [0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("cls", [L.BatchNorm, _OwnStatsBatchNorm])
def test_batchnorm_overflowed_variance_keeps_running_var_inf_not_nan(cls, momentum):
    """A batch whose variance overflows float32: the running variance becomes inf as in torch
    (momentum >= 0.5 used to give inf - inf = NaN), so eval output is the bias, not NaN."""
    x = torch.tensor([[3e38, 1.0], [-3e38, 2.0], [1e38, 4.0]])
    ours, theirs = cls(2, momentum=momentum), nn.BatchNorm1d(2, momentum=momentum)
    ours(x), theirs(x)
    assert torch.equal(ours.running_var, theirs.running_var), (ours.running_var, theirs.running_var)
    assert torch.isinf(ours.running_var[0]) and not torch.isnan(ours.running_var).any()
    ours.eval(), theirs.eval()
    x = torch.randn(3, 2)
    assert torch.isfinite(ours(x)).all()
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batchnorm_half_input_with_float32_module(dtype):
    """A float32 module on half inputs (autocast-style): torch's mixed-dtype kernel, float32
    statistics, output in the input dtype, close to the float64 reference."""
    bn = L.BatchNorm(6, unbiased=True)
    x = torch.randn(32, 6, 5).to(dtype)
    y = bn(x)
    assert y.dtype == dtype
    atol, rtol = TOL[dtype]
    expect = ref_batch_norm(x.double(), unbiased=True)
    torch.testing.assert_close(y.double(), expect, atol=atol * 2, rtol=rtol * 2)
    torch.testing.assert_close(bn.running_var.double(),
                               0.9 + 0.1 * x.double().var(dim=(0, 2)), atol=1e-3, rtol=1e-3)


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
    (L.LayerNorm(4), torch.ones(2, 4, dtype=torch.long), r"floating-point.*torch.int64.*x.float\(\)"),
    (L.BatchNorm(8), torch.randn(4, 6), r"\(N, 8, \.\.\.\).*received shape \(4, 6\) \(6 channels\)"),
    (L.ConvLayerNorm(3), torch.randn(2, 4, 5, 5), r"\(N, 3, \.\.\.\).*4 channels"),
    (L.RMSNorm(8), torch.randn(2, 7), r"received shape \(2, 7\)"),
    (L.RMSNorm(8), torch.ones(2, 8, dtype=torch.int32), r"torch.int32"),
])
def test_bad_input_errors_say_expected_received_fix(module, x, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern) as info:
        module(x)
    msg = str(info.value)
    assert "expected" in msg and "received" in msg
    assert isinstance(info.value, RuntimeError)  # what torch raises for a wrong shape or dtype


@pytest.mark.parametrize("build, exc, pattern", [
    (lambda: L.BatchNorm(0), ValueError, r"num_features to be a positive int, received num_features=0"),
    (lambda: L.BatchNorm(-3), RuntimeError, r"received num_features=-3"),
    (lambda: L.BatchNorm(2.5), TypeError, r"positive int, received float 2.5"),
    (lambda: L.ConvLayerNorm(0), ValueError, r"num_channels to be a positive int, received num_channels=0"),
    (lambda: L.make_norm("layer", 0), ValueError, r"make_norm\('layer', ...\) expected num_features"),
    (lambda: L.make_norm("rms", 0), ValueError, r"received num_features=0"),
    (lambda: L.LayerNorm((4, 0)), ValueError, r"normalized_shape to be a positive int, received normalized_shape=0"),
    (lambda: L.RMSNorm(0), ValueError, r"normalized_shape"),
    (lambda: L.BatchNorm(4, momentum=2), ValueError, r"momentum in \[0, 1\].*received momentum=2.*momentum=None"),
    (lambda: L.BatchNorm(4, momentum="0.1"), TypeError, r"momentum to be a float.*received str '0.1'"),
    (lambda: L.BatchNorm(4, eps=-1), ValueError, r"eps.*>= 0.*received eps=-1"),
    (lambda: L.LayerNorm(4, eps=-1e-5), ValueError, r"received eps=-1e-05"),
    (lambda: L.RMSNorm(4, eps=float("inf")), ValueError, r"received eps=inf"),
    (lambda: L.ConvLayerNorm(4, eps=-1.0), ValueError, r"received eps=-1.0"),
    (lambda: L.make_norm("batch", 4, unbaised=True), TypeError, r"unexpected keyword argument 'unbaised' for BatchNorm\. Did you mean 'unbiased'\?.*expected one of"),
    (lambda: L.make_norm("layer", 4, elementwise=False), TypeError, r"'elementwise'.*Did you mean 'elementwise_affine'"),
    (lambda: L.make_norm("none", 4, unbiased=True), TypeError, r"'unbiased' for Identity.*Remove it"),
])
def test_bad_constructor_arguments_raise_clear_errors(build, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        build()
    msg = str(info.value)
    assert "expected" in msg and "received" in msg or "unexpected" in msg


def test_eps_zero_is_allowed_and_exact():
    """eps = 0 is the exact normalization (documented; a constant row then gives NaN, as torch)."""
    x = torch.randn(3, 8, dtype=torch.float64)
    for ours, theirs in ((L.LayerNorm(8, eps=0.0), nn.LayerNorm(8, eps=0.0)),
                         (L.RMSNorm(8, eps=0.0), nn.RMSNorm(8, eps=0.0))):
        torch.testing.assert_close(ours.double()(x), theirs.double()(x))


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


def test_bench_norms_rows_for_batch_and_rms():
    """`layernorm bench norms` times BatchNorm against nn.BatchNorm1d and RMSNorm against both
    nn.RMSNorm and nn.LayerNorm on the same tensor (tiny shapes: structure only, no speed)."""
    from layernorm_paper.bench import bench_norms
    rows = bench_norms(norms=("batch", "rms"), stat_shapes=((16, 8),), repeat=1)
    by = {(r["norm"], r["impl"]): r for r in rows}
    assert set(by) == {("BatchNorm", "torch.nn.BatchNorm1d"), ("BatchNorm", "layernorm.BatchNorm"),
                       ("BatchNorm", "layernorm.BatchNorm(unbiased=True)"),
                       ("RMSNorm", "torch.nn.RMSNorm"), ("RMSNorm", "layernorm.RMSNorm"),
                       ("RMSNorm", "torch.nn.LayerNorm")}
    assert by[("BatchNorm", "torch.nn.BatchNorm1d")]["ratio"] == 1.0
    assert by[("RMSNorm", "torch.nn.LayerNorm")]["vs torch.nn.LayerNorm"] == 1.0
    assert all(r["fwd+bwd ms"] > 0 for r in rows)
