"""functional.py against naive references and torch, forward and every gradient, per dtype."""
import pytest
import torch
import torch.nn.functional as F

import layernorm.functional as LF
from tests.conftest import DTYPES, TOL
from tests.reference import ref_batch_norm, ref_conv_layer_norm, ref_layer_norm, ref_rms_norm

SHAPES = [(1, 1, 1023), (3, 7, 256), (5, 64), (2, 3, 4, 5)]


def _leaf(t, dtype):
    return t.detach().to(dtype).requires_grad_(True)


def _check(ours_fn, ref_fn, inputs, dtype, grad_scale=1.0):
    """Compare forward and all input gradients of ours (in dtype) with the float64 reference."""
    atol, rtol = TOL[dtype]
    ours_in = [_leaf(t, dtype) if t is not None else None for t in inputs]
    ref_in = [_leaf(t, torch.float64) if t is not None else None for t in inputs]
    y, y_ref = ours_fn(*ours_in), ref_fn(*ref_in)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), y_ref, atol=atol, rtol=rtol)
    g = torch.randn_like(y_ref)
    y.backward(g.to(dtype))
    y_ref.backward(g)
    for a, b in zip(ours_in, ref_in):
        if a is not None:
            assert a.grad is not None and torch.isfinite(a.grad).all()
            torch.testing.assert_close(a.grad.double(), b.grad, atol=atol * 10 * grad_scale,
                                       rtol=rtol * 10 * grad_scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_matches_reference(shape, dtype):
    H = shape[-1]
    x, w, b = torch.randn(shape), torch.randn(H), torch.randn(H)
    _check(lambda x, w, b: LF.layer_norm(x, H, w, b), lambda x, w, b: ref_layer_norm(x, 1, w, b),
           [x, w, b], dtype, grad_scale=10 if dtype == torch.bfloat16 else 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_helper_path_equals_torch_path(dtype):
    """The fast dispatch to F.layer_norm and the shared statistics helper compute the same thing."""
    x, w, b = torch.randn(3, 7, 256).to(dtype), torch.randn(256).to(dtype), torch.randn(256).to(dtype)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(LF.normalize(x, (-1,), weight=w, bias=b), F.layer_norm(x, (256,), w, b),
                               atol=atol * 2, rtol=rtol * 2)
    # float32 parameters with a half input take the helper path; output stays in the input dtype
    y = LF.layer_norm(x, 256, w.float(), b.float())
    assert y.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_matches_reference_and_torch(shape, dtype):
    H = shape[-1]
    x, w = torch.randn(shape), torch.randn(H)
    _check(lambda x, w: LF.rms_norm(x, H, w), lambda x, w: ref_rms_norm(x, 1, w), [x, w], dtype,
           grad_scale=10 if dtype == torch.bfloat16 else 1)
    atol, rtol = TOL[dtype]
    xd, wd = x.to(dtype), w.to(dtype)
    torch.testing.assert_close(LF.rms_norm(xd, H, wd), F.rms_norm(xd, (H,), wd, eps=1e-5),
                               atol=atol * 2, rtol=rtol * 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 16), (7, 3, 5), (4, 3, 6, 5), (2, 1, 1023)])
@pytest.mark.parametrize("unbiased", [False, True])
def test_batch_norm_matches_reference(shape, dtype, unbiased):
    C = shape[1]
    x, w, b = torch.randn(shape), torch.randn(C), torch.randn(C)
    _check(lambda x, w, b: LF.batch_norm(x, w, b, unbiased=unbiased),
           lambda x, w, b: ref_batch_norm(x, w, b, unbiased=unbiased), [x, w, b], dtype,
           grad_scale=10 if dtype == torch.bfloat16 else 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_matches_torch(dtype):
    x, w, b = torch.randn(6, 5, 4, 3), torch.randn(5), torch.randn(5)
    atol, rtol = TOL[dtype]
    expect = F.batch_norm(x.double(), None, None, w.double(), b.double(), training=True)
    torch.testing.assert_close(LF.batch_norm(x.to(dtype), w.to(dtype), b.to(dtype)).double(),
                               expect, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 8, 7, 7), (3, 4, 10)])
def test_conv_layer_norm_matches_reference(shape, dtype):
    C = shape[1]
    x, w, b = torch.randn(shape), torch.randn(C), torch.randn(C)
    _check(lambda x, w, b: LF.conv_layer_norm(x, w, b), ref_conv_layer_norm, [x, w, b], dtype,
           grad_scale=10 if dtype == torch.bfloat16 else 1)


def test_ln_and_bn_differ_only_in_reduced_dims():
    """Habit 1: layer norm of x equals batch norm of x transposed so examples become channels."""
    x = torch.randn(5, 32, dtype=torch.float64)
    torch.testing.assert_close(LF.layer_norm(x, 32), LF.batch_norm(x.t().contiguous()).t())


def test_gradcheck_float64():
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    c = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    xc = torch.randn(2, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    wc = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: LF.layer_norm(x, 6, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: LF.rms_norm(x, 6, w), (x, w))
    assert torch.autograd.gradcheck(lambda x, w, b: LF.normalize(x, (-1,), weight=w, bias=b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x: LF.batch_norm(x, unbiased=True), (x,))
    assert torch.autograd.gradcheck(lambda c: LF.batch_norm(c), (c,))
    assert torch.autograd.gradcheck(lambda x, w: LF.conv_layer_norm(x, w, wc), (xc, wc))


def test_constant_row_gives_bias_not_nan():
    b = torch.randn(8)
    for dtype in DTYPES:
        x = torch.full((2, 8), 3.0, dtype=dtype, requires_grad=True)
        for y in (LF.layer_norm(x, 8, None, b.to(dtype)), LF.normalize(x, (-1,), bias=b)):
            assert torch.isfinite(y).all()
            torch.testing.assert_close(y.double(), b.double().expand(2, 8), atol=1e-2, rtol=0)
        LF.layer_norm(x, 8).sum().backward()
        assert torch.isfinite(x.grad).all()


def test_variance_is_clamped_and_eps_inside_sqrt():
    x = torch.tensor([[1e4, 1e4 + 1e-3, 1e4]], dtype=torch.float32)
    _, var = LF.moments(x, (-1,))
    assert (var >= 0).all()
    # eps inside the sqrt: a zero-variance row scales by 1/sqrt(eps), not 1/eps
    z = torch.zeros(1, 4, dtype=torch.float64)
    z[0, 0] = 1e-6
    y = LF.normalize(z, (-1,), eps=1e-5)
    expect = (z - z.mean()) / torch.sqrt(z.var(unbiased=False) + 1e-5)
    torch.testing.assert_close(y, expect)


def test_half_statistics_are_float32():
    mean, var = LF.moments(torch.randn(4, 8, dtype=torch.bfloat16), (-1,))
    assert mean.dtype == var.dtype == torch.float32
    # a large offset that bf16 summation would destroy: statistics stay right in float32
    x = (torch.randn(2, 4096) + 100).to(torch.float16)
    y = LF.normalize(x, (-1,))
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), ref_layer_norm(x.double(), 1), atol=2e-2, rtol=1e-2)


def test_nan_and_inf_propagate():
    x = torch.randn(3, 8)
    x[1, 2] = float("nan")
    x[2, 5] = float("inf")
    for y in (LF.layer_norm(x, 8), LF.rms_norm(x, 8), LF.normalize(x, (-1,))):
        assert torch.isfinite(y[0]).all()
        assert not torch.isfinite(y[1]).any() and not torch.isfinite(y[2]).all()
    assert torch.isnan(LF.batch_norm(x)).any()
