"""Data-parallel training on ``torch.distributed``: torchrun's environment, DDP, SyncBatchNorm.

Launch any run under torchrun (``torchrun --nproc-per-node 2 -m layernorm run EXPERIMENT``);
``layernorm run`` calls ``runtime()``, which calls ``init()``, and hands the runner a
``DistributedRuntime`` (its hooks: DDP, this rank's slice of each batch, only rank 0 writes,
resume state from rank 0). No home-made process orchestration: torchrun starts the processes
and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; ``init`` reads them, picks
the backend (NCCL when the device is CUDA, gloo on CPU) and joins the process group.

The paper's point, in data-parallel terms. A global batch of B examples is split into W
micro-batches of b = B / W, one per rank; each rank's loss is the mean over its b examples and
DDP averages the gradients over ranks, so the averaged gradient is the gradient of the mean loss
over all B examples

    (1/W) sum_r grad (1/b) sum_{i in rank r} l_i  =  grad (1/B) sum_{i in batch} l_i

*provided each example's loss depends on its own inputs only*. Layer norm keeps that true
(statistics per example), so W processes x b train exactly like 1 process x B. Batch norm breaks it:
each rank normalizes over its own b examples, so results depend on W, unless the batch statistics
are taken over the whole global batch (``SyncBatchNorm``, ``--sync-bn``).

Data order. The runner holds datasets in memory and draws one seeded permutation per epoch
(``experiments.training.epoch_order``), the same on every rank: what a DistributedSampler's
seeded permutation provides. The k-th global batch is positions [k B, (k + 1) B) of it in every
run, and rank r trains on its contiguous slice [r b, (r + 1) b) (``DistributedRuntime.
local_batch``): the union over ranks is exactly the single-process batch, in the same order,
the last partial batch is dropped, and every rank's slice has the same size.

    torchrun --nproc-per-node 2 -m layernorm run ddp-batch-split --preset tiny
    layernorm run ddp-batch-split --preset tiny        # the same on 1 process
    layernorm ddp-compare runs/ddp-batch-split          # LN equal, BN differs, BN + sync equal

See docs/distributed.md (several machines, --sync-bn).
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

from . import functional as LF
from ._io import atomic_write_json
from .batch_split import batch_split_rows
from .bench import format_table
from .experiments.config import Config
from .experiments.registry import register_experiment
from .experiments.training import Runtime, local_batch_size
from .experiments.training import resolve_device as _runner_device
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


def resolve_device(device: str | torch.device | None, local_rank: int = 0) -> torch.device:
    """The runner's device choice (auto: CUDA when available), and under torchrun each process on
    a node takes GPU ``local_rank``."""
    device = _runner_device(str(device or "auto"))
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


# --- the runner's distributed runtime -----------------------------------------------------------

@dataclass
class DistributedRuntime(Runtime):
    """``experiments.training``'s hooks for one rank of a torchrun group (see ``Runtime``)."""
    ctx: Context = field(default_factory=Context)

    def wrap_model(self, model: nn.Module, sync_bn: bool = False) -> nn.Module:
        return wrap_model(model, self.ctx, sync_bn=sync_bn)

    def local_batch(self, indices: torch.Tensor) -> torch.Tensor:
        b = local_batch_size(len(indices), self.world_size)
        return indices[self.rank * b:(self.rank + 1) * b]

    def mean(self, value):
        if isinstance(value, torch.Tensor):
            total = value.detach().clone()
            dist.all_reduce(total)
            return total / self.world_size
        t = torch.tensor([value], dtype=torch.float64,
                         device=self.ctx.device if self.ctx.backend == "nccl" else "cpu")
        dist.all_reduce(t)
        return float(t) / self.world_size

    def barrier(self) -> None:
        barrier(self.ctx)

    def from_writer(self, fn):
        box = [None]
        if self.is_writer:
            try:
                box = [("value", fn())]
            except Exception as err:  # re-raised on every rank, so all ranks take the same path
                box = [("error", err if _picklable(err) else
                        RuntimeError(f"{type(err).__name__}: {err}"))]
        box = [broadcast_object(box[0], self.ctx)]
        kind, value = box[0]
        if kind == "error":
            raise value
        return value


def _picklable(obj) -> bool:
    try:
        pickle.dumps(obj)
        return True
    except Exception:
        return False


def runtime(device: str | None = None) -> Runtime:
    """The runner's runtime for this process: a ``DistributedRuntime`` that joined torchrun's group
    when launched by torchrun (see ``init``), else the plain single-process ``Runtime``."""
    ctx = init(device)
    if not ctx.distributed:
        return Runtime()
    return DistributedRuntime(rank=ctx.rank, world_size=ctx.world_size, ctx=ctx)


# --- the demonstration: 1 process x 8 vs 2 processes x 4 -----------------------------------------

@register_experiment("ddp-batch-split", section="3",
                     claim="LN statistics are per example, so splitting each batch of 8 over 2 "
                           "processes (DDP) trains the same parameters; BN's do not, unless "
                           "SyncBatchNorm (--sync-bn) takes them over the global batch")
def ddp_batch_split(preset: str) -> list[Config]:
    """Run it once plainly and once under ``torchrun --nproc-per-node 2``, then
    ``layernorm ddp-compare OUT/ddp-batch-split``."""
    hidden = {"tiny": [32], "quick": [64, 64], "full": [256, 256]}[preset]
    steps, eval_every = {"tiny": (6, 2), "quick": (200, 50), "full": (2000, 250)}[preset]
    # BN with the n - 1 variance, as the paper at small batches: the count must be the global one
    # (the mlp ignores `unbiased` for other norms, so --norm overrides collapse duplicates).
    base = dict(dataset="digits", model="mlp", batch_size=8, optimizer="sgd", lr=0.1,
                steps=steps, eval_every=eval_every,
                model_args={"hidden": hidden, "unbiased": True})
    return [Config(norm="layer", **base), Config(norm="batch", **base),
            Config(norm="batch", sync_bn=True, **base)]


def _compare(args: argparse.Namespace) -> int:
    exp_dir = Path(args.exp_dir)
    if not exp_dir.is_dir():
        print(f"layernorm ddp-compare: error: expected an experiment folder such as "
              f"runs/ddp-batch-split, received {exp_dir}, which is not a directory. Run "
              f"`layernorm run ddp-batch-split` first.", file=sys.stderr)
        return 2
    rows = batch_split_rows(exp_dir)
    if not rows:
        print(f"layernorm ddp-compare: no pair of finished runs NAME and NAME-wW in {exp_dir}. "
              f"Train it on 1 process (`layernorm run ddp-batch-split`) and on several "
              f"(`torchrun --nproc-per-node 2 -m layernorm run ddp-batch-split`).", file=sys.stderr)
        return 1
    shown = [{k: f"{v:.2e}" if k == "max |param diff|" else v for k, v in r.items()}
             for r in rows]
    print(format_table(shown, list(rows[0])))
    print("\nLayer norm: each example's statistics are its own, so the split changes nothing but "
          "float rounding. Batch norm: each process normalizes over its own slice, unless "
          "--sync-bn takes the statistics over the global batch.")
    if args.json:
        atomic_write_json(args.json, rows)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("ddp-compare", help="1 process vs torchrun runs of one experiment: "
                       "largest final parameter difference")
    p.add_argument("exp_dir", help="an experiment's output folder, e.g. runs/ddp-batch-split")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=_compare)
