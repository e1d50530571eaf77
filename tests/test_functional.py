"""functional.py against naive references and torch, forward and every gradient, per dtype."""
import hashlib
import math
import os
import warnings

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


RMS_SHAPES = SHAPES + [(1, 1), (4, 3), (1, 1023), (64, 1024)]  # H = 1, 3, 1023; B = 1; threads


@pytest.fixture(params=["kernel", "small"])
def rms_path(request, monkeypatch):
    """rms_norm's two CPU paths at every size: the compiled kernel, or (the default for inputs of
    at most SMALL values) torch.nn.functional.rms_norm."""
    from layernorm import _rms_native
    monkeypatch.setattr(_rms_native, "SMALL", 0 if request.param == "kernel" else 1 << 40)
    return request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RMS_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_matches_reference_and_torch(shape, dtype, affine, rms_path):
    """Forward and every gradient against the float64 reference (the compiled kernel on CPU)."""
    if rms_path == "small" and math.prod(shape) > 16384:
        pytest.skip("inputs this large take the kernel")
    H = shape[-1]
    x, w = torch.randn(shape), torch.randn(H) if affine else None
    _check(lambda x, w: LF.rms_norm(x, H, w, eps=1e-5), lambda x, w: ref_rms_norm(x, 1, w),
           [x, w], dtype, grad_scale=10 if dtype == torch.bfloat16 else 1)
    atol, rtol = TOL[dtype]
    xd, wd = x.to(dtype), None if w is None else w.to(dtype)
    torch.testing.assert_close(LF.rms_norm(xd, H, wd, eps=1e-5), F.rms_norm(xd, (H,), wd, eps=1e-5),
                               atol=atol * 2, rtol=rtol * 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_half_input_float32_weight(dtype, rms_path):
    """A float32 layer on half inputs: float32 statistics and gain, output in the input dtype."""
    x, w = torch.randn(40, 513), torch.randn(513)
    _check(lambda x, w: LF.rms_norm(x, 513, w.float(), eps=1e-5),
           lambda x, w: ref_rms_norm(x, 1, w), [x, w], dtype,
           grad_scale=10 if dtype == torch.bfloat16 else 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_default_eps_is_torchs(dtype, rms_path):
    """eps=None as torch.nn.functional.rms_norm: the machine epsilon of the statistics' dtype
    (float32's for half types). Inputs around 1e-3 make eps visible."""
    x, w = (torch.randn(6, 32) * 1e-3).to(dtype), torch.randn(32).to(dtype)
    assert LF.rms_eps(dtype) == torch.finfo(torch.float64 if dtype == torch.float64
                                            else torch.float32).eps
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(LF.rms_norm(x, 32, w), F.rms_norm(x, (32,), w), atol=atol * 2,
                               rtol=rtol * 2)
    expect = ref_rms_norm(x, 1, w, eps=LF.rms_eps(dtype))
    torch.testing.assert_close(LF.rms_norm(x, 32, w).double(), expect, atol=atol, rtol=rtol)
    far = ref_rms_norm(x, 1, w, eps=1e-5)  # the old default would be this far off
    assert (far - expect).abs().max() > 10 * atol


def test_rms_norm_under_autograd_transforms(rms_path):
    """gradcheck, double backward, torch.func and forward-mode AD all see correct derivatives."""
    import torch.autograd.forward_ad as fwAD
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, dtype=torch.float64, requires_grad=True)
    ref = lambda x, w: ref_rms_norm(x, 1, w)  # noqa: E731
    ours = lambda x, w: LF.rms_norm(x, 9, w, eps=1e-5)  # noqa: E731
    assert torch.autograd.gradcheck(ours, (x, w))
    assert torch.autograd.gradgradcheck(ours, (x, w))  # the kernel's backward is differentiable
    jac = torch.func.jacrev(ours, argnums=(0, 1))(x, w)
    for a, b in zip(jac, torch.func.jacrev(ref, argnums=(0, 1))(x, w)):
        torch.testing.assert_close(a, b)
    t = torch.randn_like(x)
    with warnings.catch_warnings():  # torch's forward AD loads its decompositions via jit.script
        warnings.filterwarnings("ignore", message=".*torch.jit.script. is deprecated")
        expect = torch.func.jvp(lambda x: ref(x, w.detach()), (x.detach(),), (t,))[1]
        got = torch.func.jvp(lambda x: ours(x, w.detach()), (x.detach(),), (t,))[1]
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(ours(fwAD.make_dual(x.detach(), t), w.detach())).tangent
    torch.testing.assert_close(got, expect)
    torch.testing.assert_close(tangent, expect)
    with torch.inference_mode():
        torch.testing.assert_close(ours(x, w), ref(x, w).detach())


def test_rms_norm_compiled_and_torch_ops_paths_agree(monkeypatch):
    from layernorm import _rms_native
    monkeypatch.setattr(_rms_native, "SMALL", 0)
    if _rms_native.load() is None:
        pytest.skip("no C compiler: only the torch-ops path exists here")
    x = torch.randn(2, 37, 129, dtype=torch.float64, requires_grad=True)
    w = torch.randn(129, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 37, 129, dtype=torch.float64)
    grads = []
    for native in ("1", "0"):
        monkeypatch.setenv("LAYERNORM_NATIVE", native)
        assert _rms_native.eligible(x, w) == (native == "1")
        y = LF.rms_norm(x, 129, w)
        ran = y.grad_fn.next_functions[0][0].name()  # under the final reshape
        assert (ran == "_RMSNormBackward") == (native == "1"), ran
        grads.append((y, *torch.autograd.grad(y, (x, w), g)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


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
    assert torch.autograd.gradgradcheck(lambda x, w: LF.rms_norm(x, 6, w), (x, w))
    assert torch.autograd.gradgradcheck(lambda x: LF.rms_norm(x, 6), (x,))
    assert torch.autograd.gradcheck(lambda x, w, b: LF.batch_norm(x, w, b, unbiased=True), (x, w, b))
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


def test_nan_and_inf_propagate(rms_path):
    x = torch.randn(3, 8)
    x[1, 2] = float("nan")
    x[2, 5] = float("inf")
    for y in (LF.layer_norm(x, 8), LF.rms_norm(x, 8), LF.normalize(x, (-1,))):
        assert torch.isfinite(y[0]).all()
        assert not torch.isfinite(y[1]).any() and not torch.isfinite(y[2]).all()
    assert torch.isnan(LF.batch_norm(x)).any()


def test_empty_inputs_give_empty_outputs_and_grads():
    """No examples (N = 0, or another empty leading dim): empty outputs and grads, as torch."""
    for shape in ((0, 8), (3, 0, 8), (0, 2, 8)):
        x = torch.randn(shape, requires_grad=True)
        w, b = torch.ones(8, requires_grad=True), torch.zeros(8, requires_grad=True)
        for y in (LF.layer_norm(x, 8, w, b), LF.rms_norm(x, 8, w), LF.normalize(x, (-1,), weight=w)):
            assert y.shape == shape
            y.sum().backward()
            assert x.grad.shape == shape and torch.equal(w.grad, torch.zeros(8))
    xb = torch.randn(0, 4, 5, requires_grad=True)
    for y in (LF.batch_norm(xb, torch.ones(4), None), LF.batch_norm(xb, unbiased=True),
              LF.conv_layer_norm(xb, torch.ones(4), torch.zeros(4))):
        assert y.shape == (0, 4, 5)
        y.sum().backward()
        assert xb.grad.shape == (0, 4, 5)


X = torch.randn(4, 8)


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: LF.layer_norm(X, 8, eps=-1e-5), ValueError, r"eps.*>= 0.*received eps=-1e-05"),
    (lambda: LF.rms_norm(X, 8, eps=float("nan")), ValueError, r"finite.*received eps=nan"),
    (lambda: LF.batch_norm(X, eps="1e-5"), TypeError, r"eps.*received str '1e-5'.*eps=1e-5"),
    (lambda: LF.layer_norm(X, 8, torch.ones(7)), RuntimeError,
     r"weight of shape \(8,\), received weight of shape \(7,\).*torch.ones\(8\)"),
    (lambda: LF.rms_norm(X, 8, torch.ones(8, 1)), RuntimeError, r"received weight of shape \(8, 1\)"),
    (lambda: LF.batch_norm(X, None, torch.ones(3)), RuntimeError, r"bias of shape \(8,\)"),
    (lambda: LF.conv_layer_norm(X, torch.ones(8), torch.ones(2)), RuntimeError, r"bias of shape"),
    (lambda: LF.layer_norm(X, 9), RuntimeError, r"last 1 dim\(s\) are \(9,\)"),
])
def test_bad_arguments_raise_torchs_exception_type_with_a_fix(call, exc, pattern):
    """The exception type torch raises for the same mistake (shape errors are also ValueErrors)."""
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert "expected" in str(info.value) and "received" in str(info.value)


def test_eps_zero_is_exact_normalization_and_nan_on_constant_rows_as_torch():
    x = torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(LF.layer_norm(x, 8, eps=0.0), ref_layer_norm(x, 1, eps=0.0))
    torch.testing.assert_close(LF.rms_norm(x, 8, eps=0.0), ref_rms_norm(x, 1, eps=0.0))
    const = torch.full((2, 8), 3.0)
    assert torch.isnan(LF.layer_norm(const, 8, eps=0.0)).all()
    assert torch.isnan(F.layer_norm(const, (8,), eps=0.0)).all()  # torch does the same
    assert torch.isfinite(LF.layer_norm(const, 8)).all()  # the default eps: finite


# ------------------------------------------------------------ the compiled RMSNorm kernel's cache

@pytest.fixture
def fresh_kernel(monkeypatch, tmp_path):
    """A private kernel cache and a not-yet-loaded kernel; the real one is reloaded afterwards."""
    from layernorm import _rms_native
    monkeypatch.setenv("LAYERNORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LAYERNORM_NATIVE", raising=False)
    monkeypatch.setattr(_rms_native, "SMALL", 0)
    _rms_native._reset_for_tests()
    yield _rms_native, tmp_path / "cache"
    _rms_native._reset_for_tests()


def _rms_matches_reference():
    x = torch.randn(5, 33, dtype=torch.float64)
    torch.testing.assert_close(LF.rms_norm(x, 33, eps=1e-5), ref_rms_norm(x, 1))


@pytest.mark.parametrize("damage", ["truncate", "foreign", "digest", "forged", "directory"])
def test_damaged_cached_kernel_is_rebuilt_not_loaded(fresh_kernel, damage):
    native, cache = fresh_kernel
    try:  # built, not loaded: the process then loads a path it never had open, as a new one would
        cc, lib = native._target()
        native._build(cc, lib)
    except native.NativeUnavailable:
        pytest.skip("no C compiler")
    digest = cache / (lib.name + ".sha256")
    good = lib.read_bytes()

    def replace(path, data):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    if damage == "truncate":
        replace(lib, good[: len(good) // 2])
    elif damage == "foreign":  # a planted library under the predictable name, without our digest
        replace(lib, good + b"planted")
    elif damage == "digest":
        digest.write_text("0" * 64)
    elif damage == "forged":  # not a library, with a digest that matches it: dlopen fails
        replace(lib, b"not a shared object")
        digest.write_text(hashlib.sha256(b"not a shared object").hexdigest())
    else:
        lib.unlink()
        lib.mkdir()
    native._reset_for_tests()
    why = {"forged": "could not be loaded", "directory": "is not a regular file"}.get(
        damage, "does not match its recorded SHA-256")
    with pytest.warns(native.NativeKernelWarning, match=why + r".*rebuilding it") as rec:
        assert native.load() is not None
    assert len(rec) == 1 and native._verified(lib)
    _rms_matches_reference()


def test_unwritable_cache_builds_in_a_temporary_directory(fresh_kernel):
    native, cache = fresh_kernel
    cache.write_text("not a directory")  # the cache path is a file
    with pytest.warns(native.NativeKernelWarning, match="not a writable directory") as record:
        if native.load() is None:
            pytest.skip("no C compiler")
    assert len(record) == 1
    _rms_matches_reference()  # no second warning (pytest turns warnings into errors)


@pytest.mark.parametrize("cc, cause", [("/nonexistent/cc", "was not found"),
                                       ("false", "failed")])
def test_no_kernel_warns_once_and_falls_back(fresh_kernel, monkeypatch, cc, cause):
    native, cache = fresh_kernel
    monkeypatch.setenv("CC", cc)
    with pytest.warns(native.NativeKernelWarning, match=cause) as record:
        _rms_matches_reference()
    assert len(record) == 1 and "torch ops" in str(record[0].message)
    _rms_matches_reference()  # no second warning (pytest turns warnings into errors)


def test_native_off_is_silent(fresh_kernel, monkeypatch):
    native, _ = fresh_kernel
    monkeypatch.setenv("LAYERNORM_NATIVE", "0")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    _rms_matches_reference()
    assert native.load() is None
