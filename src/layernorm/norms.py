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
from .vocabulary import BY_NAME, NORMS
from .checks import (check_channels, check_choice, check_eps, check_float, check_kwargs,
                      check_momentum, check_nonempty, check_size)


def _check_shape(normalized_shape, who: str) -> None:
    for n in ((normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape):
        check_size(n, who, "normalized_shape")


def _affine_parameters(module: nn.Module, n: int, affine: bool, device, dtype) -> None:
    """Per-channel gain ``weight`` and ``bias`` of shape (n,), or None for both."""
    for name in ("weight", "bias"):
        p = nn.Parameter(torch.empty(n, device=device, dtype=dtype)) if affine else None
        module.register_parameter(name, p)


class LayerNorm(nn.LayerNorm):
    """Layer norm over the trailing ``normalized_shape`` (paper eq. 3).

    Same signature, defaults, parameter names and ``state_dict`` as ``torch.nn.LayerNorm`` (it is a
    subclass), with this package's input checks (sizes > 0, eps >= 0); the math is
    ``functional.layer_norm``. Inputs with no examples, e.g. (0, H), give empty outputs.
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device=None,
                 dtype=None) -> None:
        _check_shape(normalized_shape, "LayerNorm")
        super().__init__(normalized_shape, eps=check_eps(eps, "LayerNorm"),
                         elementwise_affine=elementwise_affine, bias=bias, device=device,
                         dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LF.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.RMSNorm):
    """RMSNorm over the trailing ``normalized_shape``: layer norm without centering, no bias.

    ``torch.nn.RMSNorm``'s signature, defaults and state_dict: ``eps=None`` (the default) is the
    machine epsilon of the input's dtype at call time (float32's for half types, where statistics
    are float32). The math is ``functional.rms_norm`` (a compiled kernel on CPU).
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        _check_shape(normalized_shape, "RMSNorm")
        super().__init__(normalized_shape, eps=None if eps is None else check_eps(eps, "RMSNorm"),
                         elementwise_affine=elementwise_affine, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LF.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class ConvLayerNorm(nn.Module):
    """Per-example layer norm for (N, C, *spatial) feature maps: statistics over C and all positions
    of one example, gain and bias per channel (C,). Equals ``nn.GroupNorm(1, C)``."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        check_size(num_channels, "ConvLayerNorm", "num_channels")
        self.num_channels, self.affine = num_channels, affine
        self.eps = check_eps(eps, "ConvLayerNorm")
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
    n - 1 variance as the paper did at batch size 4) and an exponential moving average of them
    (``momentum`` in [0, 1], or None for a cumulative average, as torch). Eval: the running
    statistics. Buffers and parameters are named as in ``torch.nn.BatchNorm1d/2d`` so their
    state_dicts load into each other. Training on a single example raises an error that points to
    layer norm; an empty batch gives an empty output and leaves the running statistics as they are.

    Runs torch's fused batch-norm kernel (``functional.fused_batch_norm``, the same math, unbiased
    variant included), except where a subclass takes its own statistics (``_batch_moments``, e.g.
    ``distributed.SyncBatchNorm``, which refuses an empty training batch) or the dtypes do not fit
    that kernel.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, unbiased: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        check_size(num_features, "BatchNorm")
        check_momentum(momentum, "BatchNorm")
        self.num_features, self.momentum = num_features, momentum
        self.eps = check_eps(eps, "BatchNorm")
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
        check_channels(x, self.num_features, "BatchNorm")
        batch_stats = self.training or not self.track_running_stats
        update = self.training and self.track_running_stats
        if self._fused_ok(x):
            if batch_stats and x.numel():
                LF.check_batch_size(x, "BatchNorm")
            factor = self._momentum_factor() if update and x.numel() else 0.0
            return LF.fused_batch_norm(x, self.running_mean if not batch_stats or update else None,
                                       self.running_var if not batch_stats or update else None,
                                       self.weight, self.bias, training=batch_stats,
                                       momentum=factor, eps=self.eps, unbiased=self.unbiased)
        view = (1, -1) + (1,) * (x.dim() - 2)
        weight = None if self.weight is None else self.weight.view(view)
        bias = None if self.bias is None else self.bias.view(view)
        if batch_stats:
            # statistics another way (_batch_moments, e.g. over processes): every call takes part
            check_nonempty(x, "BatchNorm")
            mean, var, count = self._batch_moments(x)
            if update:
                self._update_running(mean, var, count)
        else:
            mean = self.running_mean.view(view)
            var = self.running_var.view(view)
        return LF.apply_moments(x, mean, var, weight=weight, bias=bias, eps=self.eps)

    def _fused_ok(self, x: torch.Tensor) -> bool:
        """torch's kernel computes this layer's statistics: ours are not overridden and the dtypes
        fit it."""
        return (type(self)._batch_moments is BatchNorm._batch_moments
                and LF.fused_batch_norm_ok(x, self.weight, self.bias, self.running_mean,
                                           self.running_var))

    def _momentum_factor(self) -> float:
        """Counts this batch; the weight of its statistics in the running average (torch's rule:
        ``momentum``, or 1 / batches seen when momentum is None)."""
        self.num_batches_tracked.add_(1)
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def _batch_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Mean and variance over the batch dims (kept), and how many values per channel they saw.

        The one place batch statistics are taken outside torch's kernel:
        ``distributed.SyncBatchNorm`` overrides it to take them over the batch split across
        processes.
        """
        LF.check_batch_size(x, "BatchNorm")
        mean, var = LF.moments(x, LF.batch_dims(x), unbiased=self.unbiased)
        return mean, var, x.numel() // x.shape[1]

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, n: int) -> None:
        # Running variance is the unbiased estimate, as in torch.nn.BatchNorm; n values per channel.
        # (1 - m) * running + m * new, as torch computes it: an overflowed (inf) batch variance
        # gives an inf running variance (eval output: the bias), never inf - inf = NaN.
        unbiased_var = var * (n / (n - 1)) if not self.unbiased else var
        m = self._momentum_factor()
        for buf, new in ((self.running_mean, mean), (self.running_var, unbiased_var)):
            buf.mul_(1 - m).add_(new.flatten().to(buf.dtype), alpha=m)

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


def make_norm(name: str, num_features: int, *, conv: bool = False, eps: float = 1e-5,
              **kwargs) -> nn.Module:
    """The normalization applied to the summed inputs of a layer with ``num_features`` units.

    name: one of ``NORMS`` (the table in ``layernorm.vocabulary``). ``conv=True`` for
    (N, C, H, W) feature maps. "weight" and "none" act on the activations as the identity (weight
    norm lives in the layer: use ``norm_block``). Extra keyword arguments go to the module (e.g.
    ``unbiased=True`` for "batch"); a name the module does not take is a TypeError naming the
    closest one. ``eps`` is the paper's 1e-5 for every
    norm, "rms" included (``RMSNorm`` alone defaults to torch's ``eps=None``).
    """
    check_choice(name, NORMS, "norm")
    check_size(num_features, f"make_norm({name!r}, ...)")
    if conv and not BY_NAME[name].conv:         # "rms"
        raise ValueError("make_norm('rms', conv=True) is not provided: RMSNorm normalizes the "
                         "trailing dims of (..., features) inputs, received conv=True. Use "
                         "'layer' for feature maps, or apply 'rms' to (N, ..., C) tensors.")
    cls = {"layer": ConvLayerNorm if conv else LayerNorm, "batch": BatchNorm,
           "rms": RMSNorm}.get(name)
    if cls is None:
        if kwargs:
            check_kwargs(kwargs, nn.Identity, f"make_norm({name!r}, ...)")
        return nn.Identity()
    check_kwargs(kwargs, cls, f"make_norm({name!r}, ...)")
    return cls(num_features, eps=eps, **kwargs)


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
