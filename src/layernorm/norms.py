"""Normalization layers as thin modules over ``functional``, and ``make_norm`` to pick one by name.

    make_norm("layer", 256)             LayerNorm over 256 features (drop-in for torch.nn.LayerNorm)
    make_norm("layer", 32, conv=True)   per-example LN over (C, H, W) with per-channel gain and bias
    make_norm("batch", 256)             BatchNorm baseline (running statistics for eval)
    make_norm("rms", 256)               RMSNorm
    make_norm("none", 256)              identity
    norm_block(nn.Linear(784, 256), "weight")   weight norm: re-parameterizes the layer itself

Weight norm is not a function of the activations: it re-parameterizes the preceding layer's weight
(w = g v / ||v||). ``norm_block`` builds "layer, then its normalization" for every name including
"weight", so experiments switch method with one string.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn.utils import parametrizations

from . import functional as LF
from ._checks import check_channels, check_choice, check_float, check_nonempty


def _affine_parameters(module: nn.Module, n: int, affine: bool, device, dtype) -> None:
    """Per-channel gain ``weight`` and ``bias`` of shape (n,), or None for both."""
    for name in ("weight", "bias"):
        p = nn.Parameter(torch.empty(n, device=device, dtype=dtype)) if affine else None
        module.register_parameter(name, p)


class LayerNorm(nn.LayerNorm):
    """Layer norm over the trailing ``normalized_shape`` (paper eq. 3).

    Same signature, defaults, parameter names and ``state_dict`` as ``torch.nn.LayerNorm`` (it is a
    subclass), with this package's input checks; the math is ``functional.layer_norm``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LF.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.RMSNorm):
    """RMSNorm over the trailing ``normalized_shape``: layer norm without centering, no bias.

    ``torch.nn.RMSNorm``'s parameters and state_dict; eps defaults to 1e-5 like the other norms here.
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine,
                         device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LF.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class ConvLayerNorm(nn.Module):
    """Per-example layer norm for (N, C, *spatial) feature maps: statistics over C and all positions
    of one example, gain and bias per channel (C,). Equals ``nn.GroupNorm(1, C)``."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.num_channels, self.eps, self.affine = num_channels, eps, affine
        _affine_parameters(self, num_channels, affine, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x, "ConvLayerNorm")
        check_channels(x, self.num_channels, "ConvLayerNorm")
        return LF.conv_layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_channels}, eps={self.eps}, affine={self.affine}"


class BatchNorm(nn.Module):
    """Batch norm baseline for (N, C) or (N, C, *spatial) inputs.

    Training: batch statistics (``functional.batch_norm``; ``unbiased=True`` normalizes with the
    n - 1 variance as the paper did at batch size 4) and an exponential moving average of them.
    Eval: the running statistics. Buffers and parameters are named as in ``torch.nn.BatchNorm1d/2d``
    so their state_dicts load into each other. Training on a single example raises an error that
    points to layer norm.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, unbiased: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats, self.unbiased = affine, track_running_stats, unbiased
        _affine_parameters(self, num_features, affine, device, dtype)
        factory = {"device": device, "dtype": dtype}
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **factory))
            self.register_buffer("running_var", torch.ones(num_features, **factory))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long,
                                                                     device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x, "BatchNorm")
        check_nonempty(x, "BatchNorm")
        check_channels(x, self.num_features, "BatchNorm")
        view = (1, -1) + (1,) * (x.dim() - 2)
        weight = None if self.weight is None else self.weight.view(view)
        bias = None if self.bias is None else self.bias.view(view)
        if self.training or not self.track_running_stats:
            LF.check_batch_size(x, "BatchNorm")
            mean, var = LF.moments(x, LF.batch_dims(x), unbiased=self.unbiased)
            if self.training and self.track_running_stats:
                self._update_running(x, mean, var)
        else:
            mean = self.running_mean.view(view)
            var = self.running_var.view(view)
        return LF.apply_moments(x, mean, var, weight=weight, bias=bias, eps=self.eps)

    @torch.no_grad()
    def _update_running(self, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> None:
        # Running variance is the unbiased estimate, as in torch.nn.BatchNorm.
        n = x.numel() // x.shape[1]
        unbiased_var = var * (n / (n - 1)) if not self.unbiased else var
        m = self.momentum
        self.running_mean.lerp_(mean.flatten().to(self.running_mean.dtype), m)
        self.running_var.lerp_(unbiased_var.flatten().to(self.running_var.dtype), m)
        self.num_batches_tracked += 1

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}, "
                f"unbiased={self.unbiased}")


def weight_norm(module: nn.Module, name: str = "weight", dim: int = 0) -> nn.Module:
    """Weight norm (Salimans & Kingma 2016) on ``module.<name>``: w_i = g_i v_i / ||v_i||.

    In the paper's terms mu = 0 and sigma_i = ||w_i||: a re-parameterization, no data statistics.
    Uses torch's parametrizations (``weight.original0`` is g, ``weight.original1`` is v).
    """
    param = getattr(module, name, None)
    if not isinstance(param, torch.Tensor) or param.dim() < 2:
        raise ValueError(f"weight_norm expected a layer with a weight matrix or kernel "
                         f"'{name}' of 2 or more dims (nn.Linear, nn.Conv2d, ...), received "
                         f"{type(module).__name__} whose '{name}' is "
                         f"{None if param is None else tuple(param.shape)}. Apply it to a Linear "
                         f"or Conv layer.")
    return parametrizations.weight_norm(module, name=name, dim=dim)


NORMS = ("layer", "batch", "rms", "weight", "none")


def make_norm(name: str, num_features: int, *, conv: bool = False, eps: float = 1e-5,
              **kwargs) -> nn.Module:
    """The normalization applied to the summed inputs of a layer with ``num_features`` units.

    name: one of ``NORMS``. ``conv=True`` for (N, C, H, W) feature maps. "weight" and "none" act on
    the activations as the identity (weight norm lives in the layer: use ``norm_block``). Extra
    keyword arguments go to the module (e.g. ``unbiased=True`` for "batch").
    """
    check_choice(name, NORMS, "norm")
    if name == "layer":
        return ConvLayerNorm(num_features, eps=eps, **kwargs) if conv else \
            LayerNorm(num_features, eps=eps, **kwargs)
    if name == "batch":
        return BatchNorm(num_features, eps=eps, **kwargs)
    if name == "rms":
        if conv:
            raise ValueError("make_norm('rms', conv=True) is not provided: RMSNorm normalizes the "
                             "trailing dims of (..., features) inputs, received conv=True. Use "
                             "'layer' for feature maps, or apply 'rms' to (N, ..., C) tensors.")
        return RMSNorm(num_features, eps=eps, **kwargs)
    return nn.Identity()


def norm_block(layer: nn.Module, norm: str, **kwargs) -> nn.Sequential:
    """``layer`` followed by its normalization ``norm`` (the summed inputs are normalized).

    For "weight" the layer's weight is re-parameterized instead. The feature count and conv-ness are
    read off the layer (``out_features`` or ``out_channels``).
    """
    check_choice(norm, NORMS, "norm")
    conv = isinstance(layer, nn.modules.conv._ConvNd)
    num_features = layer.out_channels if conv else getattr(layer, "out_features", None)
    if num_features is None:
        raise ValueError(f"norm_block expected an nn.Linear or nn.Conv layer, received "
                         f"{type(layer).__name__}. Wrap a Linear/Conv layer, or call make_norm.")
    if norm == "weight":
        layer = weight_norm(layer)
    return nn.Sequential(layer, make_norm(norm, num_features, conv=conv, **kwargs))
