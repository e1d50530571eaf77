"""``SyncBatchNorm``: this package's batch norm with its training statistics taken over the global
batch split across the processes of a ``torch.distributed`` group (``--sync-bn``).

The paper's section 3 in data-parallel terms: layer norm's statistics are per example, so W
processes x b examples train exactly like 1 process x B = W b; batch norm's are per batch, so each
rank would normalize over its own b examples, unless the statistics are all-reduced over the
global batch, as here. See docs/distributed.md.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn

from . import functional as LF
from .norms import BatchNorm


class _AllReduceSum(torch.autograd.Function):
    """Differentiable all-reduce sum: y = sum_r x_r on every rank, so dL/dx_r = sum_r' dL_r'/dy,
    the all-reduce sum of the incoming gradients (the loss being the sum over ranks of their
    losses; DDP then divides parameter gradients by the world size)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        y = x.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(y, group=group)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _AllReduceSum.apply(grad, ctx.group), None


def all_reduce_moments(x: torch.Tensor, dims: Sequence[int], *, unbiased: bool = False,
                       group=None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``functional.moments`` over ``dims`` of the batch split across the processes of ``group``.

    Two passes like the local statistics: the sum and count are all-reduced for the mean, then the
    sum of squared deviations from that mean for the variance (no E[x^2] - E[x]^2 cancellation).
    Both all-reduces are differentiable: the gradient reaching each rank's input includes every
    rank's loss through the shared statistics, which is what makes W x b with DDP equal to 1 x B.
    Returns (mean, var, values per channel over all ranks); mean and var are kept-dim, in
    ``functional.stats_dtype``.
    """
    group = group or dist.group.WORLD
    dims = tuple(dims)
    xs = x.to(LF.stats_dtype(x.dtype))
    local_sum = xs.sum(dim=dims, keepdim=True)                         # (1, C, 1, ...)
    local_n = math.prod(x.shape[d] for d in dims)
    packed = _AllReduceSum.apply(torch.cat([local_sum.flatten(), xs.new_tensor([local_n])]), group)
    n = int(packed[-1].item())
    if n < 2:
        raise ValueError(f"SyncBatchNorm in training needs more than one value per channel over "
                         f"all processes, received {n} (input shape {tuple(x.shape)} on this "
                         f"rank). "
                         f"Use a larger batch, or layer norm, which needs no batch statistics.")
    mean = (packed[:-1] / n).view_as(local_sum)
    sq = _AllReduceSum.apply((xs - mean).square().sum(dim=dims, keepdim=True).flatten(), group)
    var = (sq / (n - int(unbiased))).view_as(local_sum).clamp_min(0)
    return mean, var, n


class SyncBatchNorm(BatchNorm):
    """``norms.BatchNorm`` whose training statistics are taken over the global batch split across
    the processes of ``process_group`` (default: all). Same parameters, buffers and options
    (``unbiased`` included); without an initialized process group it is plain BatchNorm.

    torch.nn.SyncBatchNorm plays this role for torch's own BatchNorm layers, but it runs on
    CUDA/XPU only and has no ``unbiased`` option, so this package's BatchNorm gets its own.
    """

    def __init__(self, *args, process_group=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.process_group = process_group

    def _batch_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        if not (dist.is_available() and dist.is_initialized()):
            return super()._batch_moments(x)
        return all_reduce_moments(x, LF.batch_dims(x), unbiased=self.unbiased,
                                  group=self.process_group)


def convert_sync_batchnorm(module: nn.Module, process_group=None) -> nn.Module:
    """``module`` with every batch norm layer synchronized across processes (``--sync-bn``).

    This package's ``BatchNorm`` becomes ``SyncBatchNorm`` sharing the same parameter and buffer
    tensors; torch's own BatchNorm layers go through
    ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` (CUDA only, as torch implements it).
    Returns the converted module (the root may be replaced).
    """
    if isinstance(module, BatchNorm) and not isinstance(module, SyncBatchNorm):
        sync = SyncBatchNorm(module.num_features, eps=module.eps, momentum=module.momentum,
                             affine=module.affine, track_running_stats=module.track_running_stats,
                             unbiased=module.unbiased, process_group=process_group)
        for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            if getattr(module, name) is not None:
                setattr(sync, name, getattr(module, name))
        sync.train(module.training)
        return sync
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    for name, child in module.named_children():
        new = convert_sync_batchnorm(child, process_group)
        if new is not child:
            setattr(module, name, new)
    return module
