"""What the fused LN-LSTM and LN-GRU (``lstm``, ``gru`` and their backends), the BN cells
(``bn``) and the cells' step (``cell``) share around their own math, called from above and
calling nothing above it (the runtime questions and each operator's choice of path are
``native``'s, the operators' autograd ``sequence``'s).

* The buffer pool: big CPU sequence buffers kept across calls and reused once free
  (``_Workspace``, docs/rnnfast.md). (``gemm`` holds the input term's GEMM, the C kernels' panel
  layout, and the cache of packed weights they share.)
* Checks: argument checks, the compute dtype (half types and autocast), the recurrent
  regularizers' masks, and the input LN when it runs outside the kernel.
* The C kernels' side of an operator: the empty saved buffers
  without ``save``, the backward in ranges of steps with dW_hh accumulated (``native_backward``)
  and the fake tensors of the saved buffers.

Lengths travel in ONE encoding from the caller to the kernels, ``batch_sizes`` (checked and made
in ``layernorm.recurrence.lengths``): step t runs the first ``batch_sizes[t]`` examples of a
batch sorted by decreasing length. ``None`` means every example runs all T steps.

In eager mode on plain CPU float32 tensors (``native.Where.eager``) a call skips torch's
dispatcher and runs the operator's body under a ``torch.autograd.Function`` with the same
autograd (measured ~0.12 ms a forward and ~0.17 ms a backward call of dispatch and argument
handling, at any size); under torch.compile / torch.export the registered operators run, one
opaque op each.
"""
from __future__ import annotations

import contextlib
import math
import threading

import torch

from .._autograd import differentiable_backward  # noqa: F401  (the ops' second order)
from ..functional import HALF_DTYPES as _HALF, stats_dtype  # noqa: F401  (stats_dtype: the ops)
from . import native
from . import gemm
from .gemm import WeightGrad


# ---- the buffer pool of the whole-sequence C kernels

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

    def holds(self, t: torch.Tensor) -> bool:
        """Whether t is a view of one of the pool's buffers: a tensor internal to the operators
        (the input term ``gemm.input_linear`` wrote for them), whose gradient is internal too."""
        cdata = t.untyped_storage()._cdata
        return any(fit[3] == cdata for fit in self._fits)

    def release(self) -> None:
        with self._lock:
            self._keep([b for b in self._bufs if not self._free(b)])


_WORKSPACE = _Workspace()
gemm.POOL = _WORKSPACE  # (``gemm.input_linear``'s pooled input term)


def release_workspace() -> None:
    """Give the free sequence buffers kept for reuse back to the allocator."""
    _WORKSPACE.release()


def _buffer(*shape, like: torch.Tensor, zero: bool = True, pooled: bool = False) -> torch.Tensor:
    """A buffer for a whole sequence: zero-filled where rows past an example's length must read as
    0; ``zero=False`` for buffers the C kernels write completely (a 13 MB fill is ~1 ms).
    ``pooled``: from the pool, for a result that autograd converts or consumes and drops (the
    float32 gradient of a half-type input term; the gradient of an input term that came from the
    pool, ``_Workspace.holds``), so its first touch costs no page faults."""
    if pooled:
        buf = _WORKSPACE.get(shape, like=like)
        return buf.zero_() if zero else buf
    return like.new_zeros(shape) if zero else like.new_empty(shape)


def grad_buffer(xg: torch.Tensor, zero: bool, bf16: bool = False) -> torch.Tensor:
    """The backward's buffer for the gradient of the input term ``xg`` (T, B, G): from the pool
    where ``bf16`` (autograd converts it) or where xg itself came from the pool (the modules'
    input term, ``_Workspace.holds``: its gradient stays inside the operators too); else a plain
    tensor, which may reach the user as the grad of their own input term."""
    return _buffer(*xg.shape, like=xg, zero=zero, pooled=bf16 or _WORKSPACE.holds(xg))


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


# ---- checks and dtypes

def check_shapes(who: str, xg, states: dict, w_hh, gates: int, vectors: dict,
                 autocast: torch.dtype | None = None) -> tuple[int, int, int]:
    """Shapes (and one device; one dtype unless under autocast, ``autocast`` its dtype) of the
    arguments of ``ln_*_sequence`` -> (T, B, H)."""
    if xg.dim() != 3:
        raise ValueError(f"{who} expected xg of shape (T, B, {gates}*H), received shape "
                         f"{tuple(xg.shape)}. Pass the input term for all steps, time first.")
    T, B, G = xg.shape
    if T == 0:
        raise ValueError(f"{who} expected at least one time step, received xg of shape "
                         f"{tuple(xg.shape)}. Skip empty sequences before calling it.")
    if G % gates:
        raise ValueError(f"{who} expected xg's last dim to be {gates}*H, received {G}.")
    H = G // gates
    for name, s in states.items():
        if tuple(s.shape) != (B, H):
            raise ValueError(f"{who} expected {name} of shape (B, H) = ({B}, {H}), received "
                             f"{tuple(s.shape)}. Pass one state per example (squeeze the layer "
                             f"dim of a (1, B, H) state).")
    if tuple(w_hh.shape) != (G, H):
        raise ValueError(f"{who} expected w_hh of shape ({G}, {H}) ({gates}*H x H), received "
                         f"{tuple(w_hh.shape)}.")
    for name, (v, n) in vectors.items():
        if tuple(v.shape) != (n,):
            raise ValueError(f"{who} expected {name} of shape ({n},), received {tuple(v.shape)}.")
    tensors = [xg, w_hh, *states.values(), *(v for v, _ in vectors.values())]
    dtypes = {t.dtype for t in tensors}
    # one device: all on the CPU (asked without making a device object per tensor), or one set
    one_device = all(t.is_cpu for t in tensors) or len({t.device for t in tensors}) == 1
    if not one_device or (len(dtypes) != 1 and autocast is None):
        raise ValueError(f"{who} expected all tensors on one device with one dtype, received "
                         f"{sorted({(str(t.device), str(t.dtype)) for t in tensors})}. Move them "
                         f"with .to(xg) (under torch.autocast mixed dtypes are cast for you).")
    return T, B, H


def check_masks(who: str, xg: torch.Tensor, T: int, B: int, H: int, **masks) -> bool:
    """The recurrent regularizers' tensors of ``ln_*_sequence`` (docs/rnn.md) checked: ``h_mask``
    (B, H), ``zone_*`` (T, B, H), floating, on xg's device, or None -> whether any is given."""
    for name, m in masks.items():
        if m is None:
            continue
        shape = (B, H) if name == "h_mask" else (T, B, H)
        if not isinstance(m, torch.Tensor) or tuple(m.shape) != shape:
            got = tuple(m.shape) if isinstance(m, torch.Tensor) else type(m).__name__
            raise ValueError(f"{who} expected {name} of shape {shape} "
                             f"({'B, H' if len(shape) == 2 else 'T, B, H'}), received {got}. "
                             f"Sample it with the batch's shape (docs/rnn.md), or pass None.")
        if m.device != xg.device or not m.dtype.is_floating_point:
            raise ValueError(f"{who} expected {name} as a floating tensor on {xg.device}, "
                             f"received {m.dtype} on {m.device}. Move it with .to(xg).")
    return any(m is not None for m in masks.values())


def prepare_masks(masks, compute: torch.dtype, order) -> list:
    """The checked masks detached (they get no gradient), in the compute dtype, contiguous and in
    the sorted batch's order (``order`` from the lengths, or None)."""
    found = []
    for m in masks:
        if m is not None:
            m = m.detach().to(compute)
            if order is not None:
                m = m.index_select(m.dim() - 2, order.to(m.device))
            m = m.contiguous()
        found.append(m)
    return found


def masked_h(h: torch.Tensor, h_mask: torch.Tensor | None) -> torch.Tensor:
    """h as the recurrent product reads it: times the recurrent dropout mask (rows of h first)."""
    return h if h_mask is None else h * h_mask[:h.shape[-2]]


def zone_arg(*zones):
    """``run_direction``'s ``zone`` from the zoneout tensors (None where off)."""
    return None if all(z is None for z in zones) else zones


def dtypes(xg: torch.Tensor, autocast: torch.dtype | None) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, output dtype). As torch.nn.LSTM: under autocast (``autocast``, its dtype,
    or None where it is off) the result is in the autocast dtype, else in xg's (float64 is not
    cast, as torch). On the CPU half types compute in float32 (converted once per call; the
    statistics are float32 either way), so the C kernels run them."""
    out = autocast if autocast is not None and xg.dtype != torch.float64 else xg.dtype
    compute = torch.float32 if xg.device.type == "cpu" and out in _HALF else out
    return compute, out


def input_ln(who: str, xg, gain_x, bias_x, groups: tuple[int, ...], eps: float, inside: bool):
    """The optional input LN of ``ln_*_sequence`` (each group of units normalized on its own).
    Returns (xg, gain_x, bias_x): unchanged when the C kernel applies it (``inside``), else xg
    normalized here with ordinary autograd and (None, None)."""
    if (gain_x is None) != (bias_x is None):
        raise ValueError(f"{who} expected gain_x and bias_x together (the input LN's gain and "
                         f"bias) or neither, received only one. Pass both, or None.")
    if gain_x is None or inside:
        return xg, gain_x, bias_x
    parts = zip(xg.split(groups, -1), gain_x.split(groups), bias_x.split(groups))
    xg = torch.cat([torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps)
                    for x, g, b in parts], -1)
    return xg, None, None


def autocast_off(device: str):
    """A context with autocast off on ``device`` (the C kernels' calls read float32 tensors): a
    no-op context where autocast is not on (entering torch.autocast costs ~3 us, twice a layer)."""
    return torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) \
        else contextlib.nullcontext()


def saved_or_empty(saved, xw: torch.Tensor, n_buffers: int) -> list:
    """A forward operator's saved buffers, or without ``save`` (``saved`` None) empty ones:
    ``n_buffers`` of xw's dtype and the statistics."""
    if saved is not None:
        return saved
    return [*(xw.new_empty(0) for _ in range(n_buffers)),
            xw.new_empty(0, dtype=stats_dtype(xw.dtype))]


# How the sequence kernels' threads split each step's products (the C ``forward_seq`` /
# ``backward_seq``'s ``path``): 0 the C's rule, 1 the columns of the products for every row,
# 2 each thread its rows. The rule takes the rows, 4 a thread at least, from 4 rows a thread on
# (8 for the inference kernels, which time both below that: ``inference``), and the columns
# below, where the rows would leave threads idle. Both give the same products and rows.
SPLIT = 0

# The backward kernels run over the sequence in ranges of at most this many bytes of ``dhg`` (the
# gradient of W_hh h_{t-1}) and a quarter of the steps, each range followed by its share of dW_hh
# as one GEMM: dhg is then held for one range, not for all T steps (a (T, B, G) buffer, as large
# as xw).
CHUNK_BYTES = 2 << 20
# ... except where all of dhg takes at most this many bytes (and CHUNK_BYTES): then one kernel
# call runs all T steps (each step's sums are the same in one call as in several: the same
# numbers) and dW_hh is still summed in the same ranges (the same sum, bit for bit). A small
# sequence's backward then makes one call in place of four (each ~15 us of Python around it).
ONE_CALL_BYTES = 256 << 10


def native_backward(lib, kernel, cls, who, h0, out, batch_sizes, G, h_mask=None, bf16=False,
                    **fields):
    """Run the backward C ``kernel`` latest steps first, one range of steps per call (all steps
    in one call where ``dhg`` is small, ``ONE_CALL_BYTES``), and accumulate dW_hh = sum_t
    dhg_t^T h_{t-1} (h_{t-1}: h0 at t = 0, else out[t - 1], times ``h_mask`` when given) range
    by range -> dW_hh (G, H); ``bf16``: the operators' flag (``gemm.WeightGrad``).
    ``fields``: the rest of the kernel's arguments, as ``native.call``."""
    T, B, H = out.shape
    steps = max(1, min(-(-T // 4), CHUNK_BYTES // max(1, 4 * B * G)))  # >= 4 ranges
    one_call = 4 * T * B * G <= min(ONE_CALL_BYTES, CHUNK_BYTES)
    buf = _WORKSPACE.get((T if one_call else steps, B, G), like=out)
    dw = WeightGrad(lib, G, H, out, bf16)
    sizes = native.int32(batch_sizes)
    if one_call:
        if batch_sizes is not None:  # the kernel writes only the rows that run
            buf.zero_()
        native.call(lib, kernel, cls, who, t0=0, t1=T, h0=h0, out=out, batch_sizes=sizes,
                    dhg=buf, h_mask=h_mask, **fields)
    for hi in range(T, 0, -steps):
        lo = max(0, hi - steps)
        if one_call:
            dhg = buf[lo:hi]
        else:
            dhg = buf[:hi - lo]
            if batch_sizes is not None:  # the kernel writes only the rows that run
                dhg.zero_()
            native.call(lib, kernel, cls, who, t0=lo, t1=hi, h0=h0, out=out,
                        batch_sizes=sizes, dhg=dhg, h_mask=h_mask, **fields)
        flat = dhg.view(-1, G)
        if lo:
            dw.add(flat, masked_h(out[lo - 1:hi - 1], h_mask).reshape(-1, H))
        else:  # the first range's h_{t-1}: h0, then out (one product, not a second of B rows)
            dw.add(flat, torch.cat([masked_h(h0, h_mask),
                                    masked_h(out[:hi - 1], h_mask).reshape(-1, H)]))
    return dw.result()


def fake_saved(xw, save):
    """For a fake forward: ``new(*shape, dtype=)`` gives a saved buffer of that shape (empty
    without ``save``); ``new_stats(*shape)`` the statistics."""
    def new(*shape, dtype=xw.dtype):
        return xw.new_empty(shape if save else (0,), dtype=dtype)

    def new_stats(*shape):
        return new(*shape, dtype=stats_dtype(xw.dtype))
    return new, new_stats


