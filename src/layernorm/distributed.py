"""Data-parallel training on ``torch.distributed``: torchrun's environment, DDP, SyncBatchNorm.

Launch any run under torchrun (``torchrun --nproc-per-node 2 -m layernorm run EXPERIMENT``); the
runner calls ``init()`` and gets a ``Context`` that says which rank this process is. No home-made
process orchestration: torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT; ``init`` reads them, picks the backend (NCCL when the device is CUDA,
gloo on CPU) and joins the process group.

The paper's point, in data-parallel terms. A global batch of B examples is split into W micro-batches
of b = B / W, one per rank; each rank's loss is the mean over its b examples and DDP averages the
gradients over ranks, so the averaged gradient is the gradient of the mean loss over all B examples

    (1/W) sum_r grad (1/b) sum_{i in rank r} l_i  =  grad (1/B) sum_{i in batch} l_i

*provided each example's loss depends on its own inputs only*. Layer norm keeps that true
(statistics per example), so W processes x b train exactly like 1 process x B. Batch norm breaks it:
each rank normalizes over its own b examples, so results depend on W, unless the batch statistics
are taken over the whole global batch (``SyncBatchNorm``, ``--sync-bn``).

Data order (``sampler``): every run, single-process included, draws its epoch order from
``torch.utils.data.DistributedSampler`` seeded with the run's seed. With the same permutation p, rank
r's k-th micro-batch holds positions {W (k b + j) + r : j < b} of p, and the union over ranks is
{k B, ..., (k + 1) B - 1}: exactly the single-process k-th batch (in another order, which changes
sums only by float rounding). ``drop_last`` keeps every step's batch full on every rank.
"""
from __future__ import annotations

import datetime
import math
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler

from . import functional as LF
from .norms import BatchNorm

ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Context:
    """Where this process stands: rank ``rank`` of ``world_size``, computing on ``device``.

    ``backend`` is None for a plain single-process run (no process group).
    """
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes files (metrics, checkpoints, report)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def read_env(environ: Mapping[str, str] | None = None) -> dict | None:
    """torchrun's variables as ints/strings, or None when none is set (a single-process run).

    A partial set (some variables set, some missing) or values that do not fit together raise a
    ValueError naming what is missing and how to launch instead.
    """
    environ = os.environ if environ is None else environ
    present = [k for k in ENV_VARS if k in environ]
    if not present:
        return None
    missing = [k for k in ENV_VARS if k not in environ]
    if missing:
        raise ValueError(
            f"torch.distributed environment is partial: expected all of {list(ENV_VARS)}, received "
            f"{', '.join(f'{k}={environ[k]!r}' for k in present)} with {missing} missing. Launch "
            f"with torchrun (e.g. `torchrun --nproc-per-node 2 -m layernorm run ...`), which sets "
            f"them all, or unset {present} for a single-process run.")
    env = {"master_addr": environ["MASTER_ADDR"]}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        try:
            env[key.lower()] = int(environ[key])
        except ValueError:
            raise ValueError(f"torch.distributed environment: expected {key} to be an integer, "
                             f"received {key}={environ[key]!r}. Launch with torchrun, which sets "
                             f"it.") from None
    if env["world_size"] < 1 or not 0 <= env["rank"] < env["world_size"] or env["local_rank"] < 0:
        raise ValueError(f"torch.distributed environment: expected WORLD_SIZE >= 1, "
                         f"0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0, received "
                         f"RANK={env['rank']}, WORLD_SIZE={env['world_size']}, "
                         f"LOCAL_RANK={env['local_rank']}. Launch with torchrun, which sets them.")
    return env


def local_batch_size(global_batch: int, world_size: int) -> int:
    """Each rank's micro-batch: ``global_batch / world_size``, which must divide evenly.

    The batch size in a config is the global batch, so a run means the same optimization whatever
    the number of processes.
    """
    if global_batch % world_size:
        ok = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
        raise ValueError(f"batch_size {global_batch} is the global batch and must split evenly over "
                         f"the {world_size} processes (WORLD_SIZE={world_size}), received "
                         f"{global_batch} % {world_size} = {global_batch % world_size}. Use a "
                         f"process count that divides it ({ok}) or a batch size that is a multiple "
                         f"of {world_size}.")
    return global_batch // world_size


def resolve_device(device: str | torch.device | None, local_rank: int = 0) -> torch.device:
    """``None``/"auto": CUDA when available, else CPU. Under torchrun each process on a node takes
    GPU ``local_rank``."""
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def init(device: str | torch.device | None = None, *, global_batch: int | None = None,
         environ: Mapping[str, str] | None = None,
         timeout: datetime.timedelta = datetime.timedelta(minutes=10)) -> Context:
    """Join torchrun's process group if this process was launched by torchrun, else run alone.

    The backend follows the device: NCCL for CUDA, gloo for CPU. ``global_batch`` is checked to
    split evenly over the processes *before* any process waits on the others. Calling it again in a
    process that already joined returns the same context.
    """
    env = read_env(environ)
    if env is None:
        return Context(device=resolve_device(device))
    if global_batch is not None:
        local_batch_size(global_batch, env["world_size"])
    device = resolve_device(device, env["local_rank"])
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=env["rank"],
                                world_size=env["world_size"], timeout=timeout)
    return Context(rank=env["rank"], world_size=env["world_size"], local_rank=env["local_rank"],
                   device=device, backend=dist.get_backend())


def shutdown() -> None:
    """Leave the process group (end of a run); harmless when there is none."""
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier(ctx: Context) -> None:
    if ctx.distributed:
        dist.barrier()


def broadcast_object(obj, ctx: Context):
    """Rank 0's ``obj`` on every rank (e.g. the checkpoint to resume from, read by rank 0 only, so
    that nodes without a shared filesystem resume from the same state)."""
    if not ctx.distributed:
        return obj
    box = [obj if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0, device=ctx.device if ctx.backend == "nccl" else None)
    return box[0]


def sampler(dataset, ctx: Context, *, seed: int, shuffle: bool = True) -> DistributedSampler:
    """This rank's share of each epoch, from one seeded permutation (see module docstring).

    Use with ``DataLoader(dataset, batch_size=local_batch_size(B, W), sampler=..., drop_last=True)``
    and call ``set_epoch(epoch)`` before each epoch. Single-process runs use it too (world size 1),
    so 1 x B and W x B / W see the same global batches.
    """
    return DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                              shuffle=shuffle, seed=seed, drop_last=True)


def wrap_model(model: nn.Module, ctx: Context, *, sync_bn: bool = False) -> nn.Module:
    """The model as trained on this rank: batch norm layers synchronized if ``sync_bn``, moved to
    ``ctx.device``, and wrapped in DistributedDataParallel when there is more than one process
    (DDP broadcasts rank 0's parameters and buffers at construction, so every rank starts equal)."""
    if sync_bn:
        model = convert_sync_batchnorm(model)
    model = model.to(ctx.device)
    if not ctx.distributed:
        return model
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside a DDP wrapper (its state_dict has no ``module.`` prefix)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


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
        raise ValueError(f"SyncBatchNorm in training needs more than one value per channel over all "
                         f"processes, received {n} (input shape {tuple(x.shape)} on this rank). "
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
    tensors; torch's own BatchNorm layers go through ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``
    (CUDA only, as torch implements it). Returns the converted module (the root may be replaced).
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
