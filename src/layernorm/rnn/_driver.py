"""Calling the C kernels of ``_rnn_steps.c``: whether they apply to a tensor, the thread count,
and one call with its arguments by name (``_structs``: the ctypes mirrors of the C structs)."""
from __future__ import annotations

import ctypes

import torch

from . import _native
from ._structs import (STRUCTS as _STRUCTS, BNGRUArgs, BNLSTMArgs, GRUArgs,  # noqa: F401
                       LSTMArgs, check_layout)

__all__ = ["native_lib", "threads", "call", "int32", "LSTMArgs", "GRUArgs", "BNLSTMArgs",
           "BNGRUArgs", "USE_NATIVE"]

# Set to False to force the torch-ops path (tests run both); ``layernorm.rnn.fused.USE_NATIVE``
# reads and sets this switch.
USE_NATIVE = True


def native_lib(x: torch.Tensor):
    """The C kernels when they apply (float32 CPU tensors) and load here, else None."""
    if not USE_NATIVE or x.device.type != "cpu" or x.dtype != torch.float32:
        return None
    return _native.load()


def threads(B: int) -> int:
    """Threads for the whole-sequence C kernel: torch's count, at least 4 examples each."""
    return max(1, min(torch.get_num_threads(), B // 4))


def call(lib, kernel: str, cls, who: str, **fields) -> None:
    """Fill a ``cls`` (tensors by address: float32 / int32 / float64 as the fields say, and
    contiguous; None: NULL) and run ``kernel`` on it. The caller keeps the tensors alive."""
    names = {name for name, _ in cls._fields_}
    args = cls()
    for name, value in fields.items():
        if name not in names:
            raise TypeError(f"internal: {who}: {cls.__name__} has no field {name!r}")
        if isinstance(value, torch.Tensor):
            if not value.is_contiguous() or value.device.type != "cpu":
                raise RuntimeError(f"internal: {who}: {name} must be a contiguous CPU tensor")
            value = value.data_ptr()
        setattr(args, name, value)
    status = getattr(lib, kernel)(ctypes.byref(args))
    if status == -2:
        raise RuntimeError(f"internal: {who}: step range t0={args.t0}, t1={args.t1} outside "
                           f"[0, T={args.T}]")
    if status != 0:
        raise MemoryError(f"{who}: the C kernel could not allocate its per-thread workspace "
                          f"(status {status}). Use a smaller batch or fewer threads.")


def int32(batch_sizes: torch.Tensor | None) -> torch.Tensor | None:
    return None if batch_sizes is None else batch_sizes.to(torch.int32).contiguous()
