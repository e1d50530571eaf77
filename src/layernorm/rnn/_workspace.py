"""Sequence buffers of the fused LN-RNN paths: a pool that keeps the big CPU buffers across calls,
and zero-filled buffers for the torch-ops loops."""
from __future__ import annotations

import math
import threading

import torch

WORKSPACE_BYTES = 512 << 20  # most bytes the pool keeps (0 disables it)


class _Workspace:
    """CPU buffers of the whole-sequence kernels kept across calls and reused once free.

    A buffer of tens of MB that the allocator gets from the OS anew at every call (glibc mmaps
    big blocks and returns them on free) costs a page fault per 4 KB at first touch: measured
    +10 ms on the 12 ms LN-LSTM forward at (100, 32, 128, 256) when it saves its buffers for the
    backward. The pool keeps each buffer; a caller gets a *view* of it, and the buffer is free
    again when no tensor but the pool's own shares its storage (the views saved for the backward
    are released after it, or when the graph is dropped). Only buffers that never reach the user
    go through the pool. Thread-safe; ``release_workspace()`` drops every free buffer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bufs: list[torch.Tensor] = []
        self._ok: bool | None = None

    def _usable(self) -> bool:
        if self._ok is None:  # private refcount APIs: without them, no pool
            try:
                t = torch.empty(1)
                self._base = self._count(t)
                v = t.view(1)
                self._ok = self._count(t) == self._base + 1
                del v
            except Exception:  # noqa: BLE001
                self._ok = False
        return self._ok

    @staticmethod
    def _count(t: torch.Tensor) -> int:
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata)

    def _free(self, buf: torch.Tensor) -> bool:
        return self._count(buf) == self._base

    def get(self, shape, like: torch.Tensor) -> torch.Tensor:
        """An uninitialized tensor of this shape, dtype and device (CPU: from the pool)."""
        if like.device.type != "cpu" or WORKSPACE_BYTES <= 0 or not self._usable():
            return like.new_empty(shape)
        shape = tuple(shape)
        with self._lock:
            for buf in self._bufs:
                if buf.shape == shape and buf.dtype == like.dtype and self._free(buf):
                    return buf.view(shape)
            need = like.element_size() * math.prod(shape)
            total = sum(b.numel() * b.element_size() for b in self._bufs)
            for buf in list(self._bufs):  # make room: drop free buffers, oldest first
                if total + need <= WORKSPACE_BYTES:
                    break
                if self._free(buf):
                    self._bufs.remove(buf)
                    total -= buf.numel() * buf.element_size()
            with torch.inference_mode(False):  # a pooled buffer outlives inference mode
                buf = like.new_empty(shape)
            if total + need <= WORKSPACE_BYTES:
                self._bufs.append(buf)
                return buf.view(shape)
            return buf

    def release(self) -> None:
        with self._lock:
            self._bufs = [b for b in self._bufs if not self._free(b)]


_WORKSPACE = _Workspace()


def release_workspace() -> None:
    """Give the free sequence buffers kept for reuse back to the allocator."""
    _WORKSPACE.release()


def _buffer(*shape, like: torch.Tensor, zero: bool = True) -> torch.Tensor:
    """A buffer for a whole sequence: zero-filled where rows past an example's length must read as
    0 (or where the torch-ops steps write into it: they then write to pages already faulted in by
    one fast memset instead of faulting them in one step at a time; measured 2-3x slower steps);
    ``zero=False`` for buffers the C kernels write completely (a 13 MB fill is ~1 ms)."""
    return like.new_zeros(shape) if zero else like.new_empty(shape)
