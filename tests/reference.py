"""Naive references written straight from the equations (PAPER.md), shared by tests and benchmarks.

Deliberately plain: explicit sums, no fused kernels, everything in float64.
"""
from __future__ import annotations

import torch


def ref_layer_norm(x, k, weight=None, bias=None, eps=1e-5):
    """Normalize over the last k dims of each example: mu, sigma over its H = prod(shape) units."""
    x64 = x.double()
    lead = x64.shape[: x64.dim() - k]
    a = x64.reshape(*lead, -1)
    H = a.shape[-1]
    mu = a.sum(-1, keepdim=True) / H
    sigma = torch.sqrt(((a - mu) ** 2).sum(-1, keepdim=True) / H + eps)
    y = ((a - mu) / sigma).reshape(x64.shape)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def ref_rms_norm(x, k, weight=None, eps=1e-5):
    x64 = x.double()
    a = x64.reshape(*x64.shape[: x64.dim() - k], -1)
    rms = torch.sqrt((a ** 2).sum(-1, keepdim=True) / a.shape[-1] + eps)
    y = (a / rms).reshape(x64.shape)
    return y * weight.double() if weight is not None else y


def ref_batch_norm(x, weight=None, bias=None, eps=1e-5, unbiased=False):
    """Normalize each channel c of (N, C, *spatial) over all its N * prod(spatial) values."""
    x64 = x.double().transpose(0, 1)  # (C, N, *spatial)
    a = x64.reshape(x64.shape[0], -1)
    n = a.shape[1]
    mu = a.sum(1, keepdim=True) / n
    var = ((a - mu) ** 2).sum(1, keepdim=True) / (n - 1 if unbiased else n)
    y = ((a - mu) / torch.sqrt(var + eps)).reshape(x64.shape).transpose(0, 1)
    return _channel_affine(y, weight, bias)


def _channel_affine(y, weight, bias):
    """y * weight[c] + bias[c] for (N, C, *spatial)."""
    view = (1, -1) + (1,) * (y.dim() - 2)
    if weight is not None:
        y = y * weight.double().view(view)
    if bias is not None:
        y = y + bias.double().view(view)
    return y


def ref_conv_layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Each example of (N, C, *spatial) over all its C * prod(spatial) values; per-channel affine."""
    return _channel_affine(ref_layer_norm(x, x.dim() - 1, eps=eps), weight, bias)
