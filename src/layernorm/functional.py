"""Normalization as pure functions: statistics over some dimensions, then an affine map.

Paper section 3 (Ba, Kiros, Hinton 2016; docs/paper.md section 1). For the summed inputs ``a``
of a layer:

    mu    = mean(a)                   over the reduced dimensions
    sigma = sqrt(mean((a - mu)^2) + eps)
    out   = g * (a - mu) / sigma + b

Layer norm and batch norm run the *same* code (``normalize``) and differ only in ``dims``:

    layer norm: the hidden units of one example     dims = the trailing normalized_shape
    batch norm: the examples of the mini-batch      dims = every dim except the channel dim 1
    RMS norm:   layer norm's dims without centering (mu = 0)

Numerics: statistics in float32 for float16/bfloat16 inputs, variance clamped
at 0, eps added to the variance inside the square root, output in the input dtype. NaN/Inf in the
input propagate. eps must be >= 0; eps = 0 is the exact normalization (a constant row gives NaN,
as in torch). Empty inputs (no examples) give empty outputs, as in torch.

Speed: layer norm, batch norm and conv layer norm dispatch to torch's fused kernels, which compute
the same math; RMSNorm on large CPU inputs runs a small compiled kernel (``_rms_native``), with
torch's ``rms_norm`` as the fallback. ``normalize`` is the readable path they all agree with.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from . import kernels as _kernels
from .checks import (check_channels, check_eps, check_float, check_param_shape,
                      check_trailing_shape)

HALF_DTYPES = (torch.float16, torch.bfloat16)
"""The half types: their statistics are computed in float32 (``stats_dtype``)."""


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype statistics are computed in: float32 for half types, the input dtype otherwise."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def moments(x: torch.Tensor, dims: Sequence[int], *, unbiased: bool = False,
            center: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Mean and variance of ``x`` over ``dims`` (kept for broadcasting), in ``stats_dtype``.

    ``center=False`` returns ``(None, mean(x^2))``, the RMSNorm statistic. ``unbiased`` divides by
    n - 1 (the paper's batch-norm baseline at batch size 4). The variance is clamped at 0. An
    empty ``x`` gives NaN statistics of the kept shape.
    """
    xs = x.to(stats_dtype(x.dtype))
    dims = tuple(dims)
    if xs.numel() == 0:  # statistics of no values are NaN (as torch.mean); outputs stay empty
        nan = xs.sum(dim=dims, keepdim=True).fill_(float("nan"))
        return (nan if center else None), nan
    if center:
        var, mean = torch.var_mean(xs, dim=dims, correction=int(unbiased), keepdim=True)
    else:
        mean, var = None, xs.square().mean(dim=dims, keepdim=True)
    return mean, var.clamp_min(0)


def apply_moments(x: torch.Tensor, mean: torch.Tensor | None, var: torch.Tensor, *,
                  weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  eps: float = 1e-5) -> torch.Tensor:
    """``weight * (x - mean) / sqrt(var + eps) + bias`` computed in var's dtype, returned in x's."""
    xs = x.to(var.dtype)
    y = (xs - mean if mean is not None else xs) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.to(y.dtype)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.to(x.dtype)


def normalize(x: torch.Tensor, dims: Sequence[int], *, weight: torch.Tensor | None = None,
              bias: torch.Tensor | None = None, eps: float = 1e-5, unbiased: bool = False,
              center: bool = True) -> torch.Tensor:
    """The one normalization path: statistics of ``x`` over ``dims``, then the affine map."""
    mean, var = moments(x, dims, unbiased=unbiased, center=center)
    return apply_moments(x, mean, var, weight=weight, bias=bias, eps=eps)


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def _trailing_dims(k: int) -> tuple[int, ...]:
    return tuple(range(-k, 0))


def _same_dtype(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    return all(p is None or p.dtype == x.dtype for p in params)


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """Layer norm (paper eq. 3) over the trailing ``normalized_shape`` of each example.

    x: (..., *normalized_shape); weight, bias: normalized_shape. Statistics are per example, so the
    output for one example never depends on the rest of the batch. Dispatches to
    ``torch.nn.functional.layer_norm`` (same math, fused kernel, float32 statistics for half types)
    when parameter and input dtypes agree, otherwise runs ``normalize``.
    """
    shape = _shape(normalized_shape)
    check_float(x, "layer_norm")
    check_trailing_shape(x, shape, "layer_norm")
    check_eps(eps, "layer_norm")
    check_param_shape(weight, shape, "weight", "layer_norm")
    check_param_shape(bias, shape, "bias", "layer_norm")
    if _kernels.applies_norm(x, "layer_norm", weight, bias):  # CUDA: Triton (layernorm.kernels)
        return _kernels.layer_norm(x, shape, weight, bias, eps)
    if _same_dtype(x, weight, bias):
        return F.layer_norm(x, shape, weight, bias, eps)
    return normalize(x, _trailing_dims(len(shape)), weight=weight, bias=bias, eps=eps)


def rms_eps(dtype: torch.dtype) -> float:
    """RMSNorm's default eps, as torch's: the machine epsilon of the dtype the statistics are
    computed in (float32 for half types)."""
    return torch.finfo(stats_dtype(dtype)).eps


def rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
             weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019): layer norm's dims with mu = 0, no bias.

    ``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape``; x: (..., *shape),
    weight: shape. ``eps=None`` (the default, as ``torch.nn.functional.rms_norm``) is
    ``torch.finfo(x.dtype).eps``, float32's for half types. On CPU, inputs of more than
    ``_rms_native.SMALL`` values run a compiled kernel: one pass to take the mean square and one to
    scale, backward likewise. Everything else (small inputs, other devices, torch.func / compile /
    jit, no C compiler: one warning says so) runs ``torch.nn.functional.rms_norm``, the same math
    (statistics in float32 for half types), or ``normalize(..., center=False)`` when the weight's
    dtype differs from the input's.
    """
    shape = _shape(normalized_shape)
    check_float(x, "rms_norm")
    check_trailing_shape(x, shape, "rms_norm")
    eps = rms_eps(x.dtype) if eps is None else check_eps(eps, "rms_norm")
    check_param_shape(weight, shape, "weight", "rms_norm")
    if _kernels.applies_norm(x, "rms_norm", weight):  # CUDA: Triton (layernorm.kernels)
        return _kernels.rms_norm(x, shape, weight, eps)
    from . import _rms_native
    if x.numel() > _rms_native.SMALL and _rms_native.eligible(x, weight):
        y = _rms_native.rms_norm(x, math.prod(shape), weight, eps)
        if y is not None:
            return y
    if _same_dtype(x, weight):  # same math; least overhead on small inputs, fused on CUDA
        return F.rms_norm(x, shape, weight, eps)
    return normalize(x, _trailing_dims(len(shape)), weight=weight, eps=eps, center=False)


def _channel_view(p: torch.Tensor | None, ndim: int) -> torch.Tensor | None:
    """(C,) -> (1, C, 1, ..., 1) to broadcast over an (N, C, *spatial) input."""
    return None if p is None else p.reshape((1, -1) + (1,) * (ndim - 2))


def batch_dims(x: torch.Tensor) -> tuple[int, ...]:
    """Batch norm's reduced dims for (N, C, *spatial): every dim but the channel dim 1."""
    return (0,) + tuple(range(2, x.dim()))


def batch_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *,
               unbiased: bool = False) -> torch.Tensor:
    """Batch norm with training-mode batch statistics (Ioffe & Szegedy 2015), the paper's baseline.

    x: (N, C, *spatial); weight, bias: (C,). Each channel is normalized over the batch (and spatial)
    dims, so an example's output depends on the other examples in the batch. ``unbiased=True`` uses
    the n - 1 variance, as the paper's batch-size-4 experiment did. Needs more than one value per
    channel (an empty batch gives an empty output). Runs torch's fused kernel (``fused_batch_norm``)
    when the dtypes allow it, else ``normalize``.
    """
    check_float(x, "batch_norm")
    if x.dim() < 2:
        raise ValueError(f"batch_norm expected an input of shape (N, C, ...), received shape "
                         f"{tuple(x.shape)}. Add a batch dimension, e.g. x.unsqueeze(0).")
    check_eps(eps, "batch_norm")
    check_param_shape(weight, (x.shape[1],), "weight", "batch_norm")
    check_param_shape(bias, (x.shape[1],), "bias", "batch_norm")
    if x.numel():
        check_batch_size(x, "batch_norm")
    if fused_batch_norm_ok(x, weight, bias):
        return fused_batch_norm(x, None, None, weight, bias, training=True, momentum=0.0, eps=eps,
                                unbiased=unbiased)
    return normalize(x, batch_dims(x), weight=_channel_view(weight, x.dim()),
                     bias=_channel_view(bias, x.dim()), eps=eps, unbiased=unbiased)


def fused_batch_norm_ok(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    """torch's batch-norm kernel takes x with parameters and running statistics of x's dtype, or
    (CPU included) a half-type x with float32 ones."""
    dtypes = {p.dtype for p in params if p is not None}
    return (not dtypes or dtypes == {x.dtype}
            or (x.dtype in HALF_DTYPES and dtypes == {torch.float32}))


def fused_batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None,
                     running_var: torch.Tensor | None, weight: torch.Tensor | None,
                     bias: torch.Tensor | None, *, training: bool, momentum: float, eps: float,
                     unbiased: bool = False) -> torch.Tensor:
    """``torch.nn.functional.batch_norm`` (one fused kernel forward and backward), with the n - 1
    variance of ``unbiased=True`` as an exact rescaling of torch's biased one. With s2 the biased
    variance of n values and k = (n - 1) / n:

        (x - mu) / sqrt(s2 / k + eps) = sqrt(k) * (x - mu) / sqrt(s2 + k eps)

    i.e. the gain times sqrt(k) and eps times k. The running variance is updated with the unbiased
    estimate either way (as torch does), so the running statistics need no correction.
    """
    if training and unbiased and x.numel():
        k = 1.0 - x.shape[1] / x.numel()  # (n - 1) / n with n = numel / C values per channel
        given = [p for p in (weight, bias, running_mean, running_var) if p is not None]
        pdtype = given[0].dtype if given else stats_dtype(x.dtype)  # all alike (see _ok above)
        weight = (torch.full((x.shape[1],), math.sqrt(k), dtype=pdtype, device=x.device)
                  if weight is None else weight * math.sqrt(k))
        eps = eps * k
    return F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


def check_batch_size(x: torch.Tensor, who: str) -> None:
    """Batch statistics need at least two values per channel."""
    n = x.numel() // x.shape[1]
    if n < 2:
        raise ValueError(f"{who} in training needs more than one value per channel to compute batch "
                         f"statistics, received input of shape {tuple(x.shape)} ({n} value per "
                         f"channel, i.e. batch size 1). Batch statistics do not exist for a single "
                         f"example: use layer norm (make_norm('layer', ...)), which normalizes each "
                         f"example on its own, or train with a larger batch.")


def conv_layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """Per-example layer norm for convolutional feature maps.

    x: (N, C, *spatial); statistics of each example over C and all spatial positions; gain and bias
    per channel, weight, bias: (C,). Equals GroupNorm with one group, to which it dispatches.
    """
    check_float(x, "conv_layer_norm")
    check_eps(eps, "conv_layer_norm")
    if weight is not None:
        check_channels(x, weight.shape[0], "conv_layer_norm")
    elif x.dim() < 2:
        check_channels(x, -1, "conv_layer_norm")
    check_param_shape(weight, (x.shape[1],), "weight", "conv_layer_norm")
    check_param_shape(bias, (x.shape[1],), "bias", "conv_layer_norm")
    if _same_dtype(x, weight, bias):
        return F.group_norm(x, 1, weight, bias, eps)
    return normalize(x, tuple(range(1, x.dim())), weight=_channel_view(weight, x.dim()),
                     bias=_channel_view(bias, x.dim()), eps=eps)


_kernels.REFERENCE["norm"] = normalize  # the Triton norms' second order differentiates it
