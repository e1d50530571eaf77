"""The buffer pool of the whole-sequence C kernels (``ops.lstm``, ``ops.gru``, ``ops.bn``): big
CPU sequence buffers kept across calls and reused once free (docs/rnnfast.md)."""
from __future__ import annotations

import math
import threading

import torch

WORKSPACE_BYTES = 512 << 20  # most bytes the pool keeps (0 disables it)

# a storage's use count (a private API: without it ``_usable`` fails and there is no pool)
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _first(buf: torch.Tensor, shape) -> torch.Tensor:
    """The first elements of the flat ``buf`` as a contiguous tensor of ``shape`` (a view: one
    ``as_strided``, ~2x cheaper than ``buf[:n].view(shape)``)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return buf.as_strided(shape, strides[::-1])


class _Workspace:
    """CPU buffers of the whole-sequence kernels kept across calls and reused once free.

    A buffer of tens of MB that the allocator gets from the OS anew at every call (glibc mmaps
    big blocks and returns them on free) costs a page fault per 4 KB at first touch: measured
    +10 ms on the 12 ms LN-LSTM forward at (100, 32, 128, 256) when it saves its buffers for the
    backward. Measured over forward+backward (modules with norm="layer", one thread, this
    process's CPU time, medians of interleaved rounds with ``WORKSPACE_BYTES = 0``, a 2-core AMD
    EPYC at load ~9): without the pool / with it, LN-LSTM 1.00 at (T, B, I, H) = (100, 32, 128,
    256), 1.05 at (300, 64, 128, 512) with 2 layers, 1.08 at (50, 64, 256, 512), 1.12 with 2
    layers at (B, I, H) = (32, 128, 256) and T changing every call (76..120); LN-GRU 1.00, 1.01,
    1.03, 0.99. The pool keeps each buffer (flat); a caller gets a *view* of its first
    elements (the smallest free buffer large enough, whatever shape it served), and the buffer is
    free again when no tensor but the pool's own shares its storage (the views saved for the
    backward are released after it, or when the graph is dropped). Only buffers that never reach
    the user go through the pool. Thread-safe; ``release_workspace()`` drops every free buffer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bufs: list[torch.Tensor] = []   # oldest first
        # the look-up's view of them: (numel, dtype, buffer, storage handle) by increasing size
        # (the first free fit is then the best fit), read without asking each buffer again
        self._fits: list[tuple] = []
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
        return _use_count(t.untyped_storage()._cdata)

    def _free(self, buf: torch.Tensor) -> bool:
        return self._count(buf) == self._base

    def get(self, shape, like: torch.Tensor) -> torch.Tensor:
        """An uninitialized tensor of this shape, dtype and device (CPU: from the pool)."""
        if not like.is_cpu or WORKSPACE_BYTES <= 0 or not (self._ok or self._usable()):
            return like.new_empty(shape)
        n = math.prod(shape)
        dtype, base = like.dtype, self._base
        with self._lock:
            # best fit: the smallest free buffer of this dtype with room for n elements, whatever
            # shape it was made for (lengths change every batch in real training; a pool keyed
            # by exact shape would fill with one buffer per length and reuse none); the list is
            # kept by increasing size, so the first free fit is the smallest
            for numel, kind, buf, cdata in self._fits:
                if numel >= n and kind == dtype and _use_count(cdata) == base:
                    return _first(buf, shape)
            return self._new(tuple(shape), n, like)

    def _new(self, shape: tuple, n: int, like: torch.Tensor) -> torch.Tensor:
        """``get`` where no free buffer fits (under the lock): a new one, kept where it fits."""
        need = like.element_size() * n
        total = sum(b.numel() * b.element_size() for b in self._bufs)
        kept = []  # drop the free buffers too small for this request (the new one serves
        # what they served), then, oldest first, free ones until the new one fits the cap;
        # by identity: ``list.remove`` would compare tensors with ==
        for buf in self._bufs:
            small = buf.dtype == like.dtype and buf.numel() < n
            if (small or total + need > WORKSPACE_BYTES) and self._free(buf):
                total -= buf.numel() * buf.element_size()
            else:
                kept.append(buf)
        with torch.inference_mode(False):  # a pooled buffer outlives inference mode
            buf = like.new_empty(n)
        if total + need <= WORKSPACE_BYTES:
            kept.append(buf)
        self._keep(kept)
        return _first(buf, shape)

    def _keep(self, bufs: list[torch.Tensor]) -> None:
        """Keep these buffers (oldest first), and their look-up by size (a stable sort: of two
        of one size, the older first, as ``min`` over the oldest-first list picked)."""
        self._bufs = bufs
        self._fits = sorted(((b.numel(), b.dtype, b, b.untyped_storage()._cdata) for b in bufs),
                            key=lambda fit: fit[0])

    def release(self) -> None:
        with self._lock:
            self._keep([b for b in self._bufs if not self._free(b)])


_WORKSPACE = _Workspace()


def release_workspace() -> None:
    """Give the free sequence buffers kept for reuse back to the allocator."""
    _WORKSPACE.release()


def _buffer(*shape, like: torch.Tensor, zero: bool = True, pooled: bool = False) -> torch.Tensor:
    """A buffer for a whole sequence: zero-filled where rows past an example's length must read as
    0; ``zero=False`` for buffers the C kernels write completely (a 13 MB fill is ~1 ms).
    ``pooled``: from the pool, for a result that autograd converts and drops (the float32
    gradient of a half-type input term), so its first touch costs no page faults."""
    if pooled:
        buf = _WORKSPACE.get(shape, like=like)
        return buf.zero_() if zero else buf
    return like.new_zeros(shape) if zero else like.new_empty(shape)


class _Cast(torch.autograd.Function):
    """``t.to(dtype)`` into a pooled buffer; the gradient back in t's dtype."""

    @staticmethod
    def forward(t, dtype):
        out = _WORKSPACE.get(t.shape, like=t.new_empty(0, dtype=dtype))
        return out.copy_(t)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dtype = inputs[0].dtype

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype), None


def cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)`` (differentiable) for an operator body's input on the CPU, written into a
    pooled buffer: a half-type input term converted to float32 at every call is a fresh (T, B, G)
    allocation otherwise, whose first touch page-faults (measured 5.9 ms of a 35 ms bfloat16
    LN-LSTM training step at (T, B, I, H) = (100, 32, 128, 256), against 0.4 ms for the copy
    into a reused buffer). For eager calls on plain tensors only (the pool is not traceable)."""
    if t.dtype == dtype:
        return t                             # (what ``t.to(dtype)`` returns)
    if not t.is_cpu:
        return t.to(dtype)
    return _Cast.apply(t, dtype)
