"""This process's place in a run: the runner's hooks (``Runtime``), and torchrun's environment,
process group and DistributedDataParallel behind them (``DistributedRuntime``, ``runtime()``).

Launch any run under torchrun (``torchrun --nproc-per-node 2 -m layernorm run EXPERIMENT``);
``layernorm run`` calls ``runtime()``, which calls ``init()``, and hands the runner a
``DistributedRuntime`` (its hooks: DDP, this rank's slice of each batch, only rank 0 writes,
resume state from rank 0). No home-made process orchestration: torchrun starts the processes
and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; ``init`` reads them, picks
the backend (NCCL when the device is CUDA, gloo on CPU) and joins the process group.

The paper's point, in data-parallel terms (section 3). A global batch of B examples is split into W
micro-batches of b = B / W, one per rank; each rank's loss is the mean over its b examples and
DDP averages the gradients over ranks, so the averaged gradient is the gradient of the mean loss
over all B examples

    (1/W) sum_r grad (1/b) sum_{i in rank r} l_i  =  grad (1/B) sum_{i in batch} l_i

*provided each example's loss depends on its own inputs only*. Layer norm keeps that true
(statistics per example), so W processes x b train exactly like 1 process x B. Batch norm breaks it:
each rank normalizes over its own b examples, so results depend on W, unless the batch statistics
are taken over the whole global batch (``layernorm.sync_bn.SyncBatchNorm``, ``--sync-bn``).

Data order. The runner holds datasets in memory and draws one seeded permutation per epoch
(``training.epoch_order``), the same on every rank: what a DistributedSampler's seeded permutation
provides. The k-th global batch is positions [k B, (k + 1) B) of it in every run, and rank r trains
on its contiguous slice [r b, (r + 1) b) (``DistributedRuntime.local_batch``): the union over ranks
is exactly the single-process batch, in the same order, the last partial batch is dropped, and
every rank's slice has the same size. See docs/distributed.md (several machines, --sync-bn).
"""
from __future__ import annotations

import datetime
import os
import pickle
import sys
from dataclasses import dataclass, field
from typing import Mapping

import torch
import torch.distributed as dist
from torch import nn

from layernorm.sync_bn import convert_sync_batchnorm

ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Runtime:
    """This process's place in a run. Single process by default; a distributed runtime sets rank
    and world_size and overrides the hooks below."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_writer(self) -> bool:
        """Only the writer writes files (config, env, metrics, checkpoints, done)."""
        return self.rank == 0

    def wrap_model(self, model: torch.nn.Module, sync_bn: bool = False) -> torch.nn.Module:
        """The module the training step calls (e.g. DistributedDataParallel(model)). ``sync_bn``:
        batch-norm statistics over the global batch (one process already has all of it)."""
        return model

    def from_writer(self, fn):
        """``fn()`` computed by the writer and handed to every rank (its exception raised on every
        rank): the run directory's state as the writer sees it, so ranks without a shared
        filesystem resume from the writer's checkpoint."""
        return fn()

    def local_batch(self, indices: torch.Tensor) -> torch.Tensor:
        """This rank's share of a global batch of training-set indices."""
        return indices

    def mean(self, value):
        """Average a training statistic (a float, or a tensor of this rank) over ranks."""
        return value

    def barrier(self) -> None:
        """Wait for all ranks (after the writer wrote files others read)."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch.cuda.is_available() is False. "
                           "Use --device cpu (or auto), or install a CUDA build of torch.")
    return torch.device(name)


def local_batch_size(global_batch: int, world_size: int) -> int:
    """Each rank's micro-batch: ``global_batch / world_size``, which must divide evenly.

    The batch size in a config is the global batch, so a run means the same optimization whatever
    the number of processes.
    """
    if global_batch % world_size:
        ok = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
        raise ValueError(f"batch_size {global_batch} is the global batch and must split evenly "
                         f"over the {world_size} processes (WORLD_SIZE={world_size}), received "
                         f"{global_batch} % {world_size} = {global_batch % world_size}. Use a "
                         f"process count that divides it ({ok}) or a batch size that is a multiple "
                         f"of {world_size}.")
    return global_batch // world_size


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


def device_for_rank(device: str | torch.device | None, local_rank: int = 0) -> torch.device:
    """The runner's device choice (auto: CUDA when available), and under torchrun each process on
    a node takes GPU ``local_rank``."""
    device = resolve_device(str(device or "auto"))
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
        return Context(device=device_for_rank(device))
    if global_batch is not None:
        local_batch_size(global_batch, env["world_size"])
    device = device_for_rank(device, env["local_rank"])
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=env["rank"],
                                world_size=env["world_size"], timeout=timeout)
    return Context(rank=env["rank"], world_size=env["world_size"], local_rank=env["local_rank"],
                   device=device, backend=dist.get_backend())


def shutdown() -> None:
    """Leave the process group (end of a run); harmless when there is none. At a normal end (no
    exception on its way out) the processes first meet at a barrier, so that none tears its
    connections down while a peer is still reading from them (gloo aborts that peer: "terminate
    called without an active exception"); gloo's barrier gives up after a minute, so a peer that
    is gone does not hold the others."""
    if not dist.is_initialized():
        return
    if sys.exc_info()[0] is None:
        try:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(minutes=1))
            else:
                dist.barrier()
        except RuntimeError:        # a peer is gone: leave anyway
            pass
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


@dataclass
class DistributedRuntime(Runtime):
    """The runner's hooks for one rank of a torchrun group (see ``Runtime``)."""
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
