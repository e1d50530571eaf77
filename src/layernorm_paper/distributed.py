"""Data-parallel training on ``torch.distributed``: where its parts live, importable from here too.

* ``layernorm_paper.experiments.runtime``: torchrun's environment (``read_env``, ``init``), the process
  group, DDP (``wrap_model``) and the runner's ``DistributedRuntime`` / ``runtime()``.
* ``layernorm.sync_bn``: ``SyncBatchNorm`` and ``convert_sync_batchnorm`` (``--sync-bn``).
* ``layernorm_paper.reproduce.batch_split``: the ``ddp_batch_split`` experiment and ``ddp-compare``.

    torchrun --nproc-per-node 2 -m layernorm run ddp_batch_split --scale tiny
    layernorm run ddp_batch_split --scale tiny        # the same on 1 process
    layernorm ddp-compare runs/ddp_batch_split          # LN equal, BN differs, BN + sync equal

See docs/distributed.md.
"""
from __future__ import annotations

from .batch_split import batch_split_rows
from .experiments.runtime import (ENV_VARS, Context, DistributedRuntime, Runtime, barrier,
                                  broadcast_object, device_for_rank, init, local_batch_size,
                                  read_env, runtime, shutdown, unwrap, wrap_model)
from .reproduce.batch_split import ddp_batch_split
from layernorm.sync_bn import SyncBatchNorm, all_reduce_moments, convert_sync_batchnorm

__all__ = ["ENV_VARS", "Context", "DistributedRuntime", "Runtime", "SyncBatchNorm",
           "all_reduce_moments", "barrier", "batch_split_rows", "broadcast_object",
           "convert_sync_batchnorm", "ddp_batch_split", "device_for_rank", "init",
           "local_batch_size", "read_env", "runtime", "shutdown", "unwrap", "wrap_model"]
