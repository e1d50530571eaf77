"""What the fused LN-LSTM and LN-GRU (``lstm``, ``gru``), the BN cells (``bn``) and the cells'
step (``cell``) share around their own math.

* Buffers and GEMMs: a pool that keeps the big CPU sequence buffers across calls; oneDNN's
  packed linear for the input term, the C kernels' panel layout, and the cache of packed
  weights they share.
* Checks: argument checks, the batch's sort order, the compute dtype (half types and autocast)
  and the input LN when it runs outside the kernel.
* The operators' frame: the one choice of path (``run_sequence``: the registered operator on
  the C kernels, or the cell's reference loop under autograd), the fake tensors of the saved
  buffers, and the autograd registration (first order through the backward operator, second
  order by differentiating the reference loop). Each cell passes what is its own: its C
  forward / backward, its reference loop, and how its first-order backward calls its backward
  operator.

Lengths travel in ONE encoding from the caller to the kernels, ``batch_sizes`` (checked and made
in ``layernorm.recurrence.lengths``): step t runs the first ``batch_sizes[t]`` examples of a
batch sorted by decreasing length. ``None`` means every example runs all T steps.

In eager mode on plain CPU float32 tensors (``eager``) a call skips torch's dispatcher and runs
the operator's body under a ``torch.autograd.Function`` with the same autograd (measured ~0.12 ms
a forward and ~0.17 ms a backward call of dispatch and argument handling, at any size); under
torch.compile / torch.export the registered operators run, one opaque op each.
"""
from __future__ import annotations

import math
import threading
import weakref

import torch

from ..functional import HALF_DTYPES as _HALF, stats_dtype  # noqa: F401  (stats_dtype: the ops)
from . import native
from .native import autocast_on
from .._autograd import differentiable_backward  # noqa: F401  (the ops' second order)


# ---- the buffers

WORKSPACE_BYTES = 512 << 20  # most bytes the pool keeps (0 disables it)


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
        n = math.prod(shape)
        with self._lock:
            # best fit: the smallest free buffer of this dtype with room for n elements, whatever
            # shape it was made for (lengths change every batch in real training; a pool keyed
            # by exact shape would fill with one buffer per length and reuse none)
            fits = [b for b in self._bufs if b.dtype == like.dtype and b.numel() >= n
                    and self._free(b)]
            if fits:
                return min(fits, key=torch.Tensor.numel)[:n].view(shape)
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
            self._bufs = kept
            with torch.inference_mode(False):  # a pooled buffer outlives inference mode
                buf = like.new_empty(n)
            if total + need <= WORKSPACE_BYTES:
                self._bufs.append(buf)
                return buf[:n].view(shape)
            return buf.view(shape)

    def release(self) -> None:
        with self._lock:
            self._bufs = [b for b in self._bufs if not self._free(b)]


_WORKSPACE = _Workspace()


def release_workspace() -> None:
    """Give the free sequence buffers kept for reuse back to the allocator."""
    _WORKSPACE.release()


def _buffer(*shape, like: torch.Tensor, zero: bool = True) -> torch.Tensor:
    """A buffer for a whole sequence: zero-filled where rows past an example's length must read as
    0; ``zero=False`` for buffers the C kernels write completely (a 13 MB fill is ~1 ms)."""
    return like.new_zeros(shape) if zero else like.new_empty(shape)


_PACKED_OK: bool | None = None  # whether oneDNN's packed linear works here (checked once)


def _packed_available() -> bool:
    """oneDNN linear with a pre-packed weight (the kernel torch.compile uses on CPU): about 30%
    faster than ``torch.mm`` for a (32, 256) x (256, 1024) product. Checked once against torch.mm;
    any failure falls back to torch.mm."""
    global _PACKED_OK
    if _PACKED_OK is None:
        try:
            ok = torch.backends.mkldnn.is_available()
            if ok:
                w, h = torch.randn(24, 8), torch.randn(3, 8)
                packed = torch.ops.mkldnn._reorder_linear_weight(w, 3)
                y = torch.ops.mkldnn._linear_pointwise(h, packed, None, "none", [], "")
                ok = torch.allclose(y, h @ w.t(), atol=1e-5, rtol=1e-5)
        except Exception:  # noqa: BLE001 - any failure means "use torch.mm"
            ok = False
        _PACKED_OK = bool(ok)
    return _PACKED_OK


# oneDNN's call overhead (~5 us) beats its faster kernel only for big enough products (measured:
# slower than torch.mm at (8, 128) x (128, 512), faster from (32, 256) x (256, 768) up).
_PACKED_MIN_FLOPS = 2 ** 22


# Packed weights of the last few weight tensors, reused while the tensor holds the same values
# (inference calls reuse them; a training step's updated weights are packed again). The values
# are compared with a kept copy (~0.1 ms), since edits through ``w.data`` do not bump the version:
# (id(w), kind) -> (weakref to w, (data_ptr, version), copy of w, packed).
_PACK_CACHE: dict[tuple, tuple] = {}
_PACK_CACHE_SIZE = 16


def _cached_pack(w: torch.Tensor, kind, make):
    """``make(w)`` (a packed form of w, ``kind`` names the form), cached while w is unchanged."""
    if w._base is not None:  # a transient view (the backward's w.t()): pack, do not cache
        return make(w.detach().contiguous())
    # inference tensors have no version counter: the kept copy alone tells a changed value
    key = (w.data_ptr(), -1 if w.is_inference() else w._version)
    hit = _PACK_CACHE.get((id(w), kind))
    if hit is not None and hit[0]() is w and hit[1] == key and torch.equal(hit[2], w):
        return hit[3]
    packed = make(w.detach().contiguous())
    if len(_PACK_CACHE) >= _PACK_CACHE_SIZE:
        _PACK_CACHE.pop(next(iter(_PACK_CACHE)))
    _PACK_CACHE[(id(w), kind)] = (weakref.ref(w), key, w.detach().clone(), packed)
    return packed


def _packed_weight(w: torch.Tensor, batch: int):
    """oneDNN's packed form of w (G, K) for inputs of ``batch`` rows, or None when it does not
    apply (not CPU float32, product too small, oneDNN unavailable)."""
    if (w.device.type != "cpu" or w.dtype != torch.float32
            or batch * w.numel() < _PACKED_MIN_FLOPS or not _packed_available()):
        return None
    return _cached_pack(w, ("onednn", batch),
                        lambda wc: torch.ops.mkldnn._reorder_linear_weight(wc, batch))


def _panels(w: torch.Tensor, width: int, transposed: bool = False) -> torch.Tensor:
    """w (G, K) in the C kernel's layout: (ceil(G / width), K, width) column panels,
    panels[p, k, c] = w[p * width + c, k], zero rows padding G (``_rnn_steps.c``, gemm_rows).
    ``transposed``: the panels of w.t() (the backward's W_hh^T), made from w itself and cached
    with it. Either is one strided copy of w (measured at w (512, 128), one thread: 0.26 ms for
    the panels of the view w.t(), made and not cached, against 0.09 ms cached and 0.10 ms when w
    changed)."""
    def make(wc):
        if transposed:  # panels[p, g, c] = w[g, p * width + c]
            pad = -wc.shape[1] % width
            wc = torch.nn.functional.pad(wc, (0, pad)) if pad else wc
            return wc.reshape(wc.shape[0], -1, width).transpose(0, 1).contiguous()
        pad = -wc.shape[0] % width
        wc = torch.nn.functional.pad(wc, (0, 0, 0, pad)) if pad else wc
        return wc.reshape(-1, width, wc.shape[1]).transpose(1, 2).contiguous()
    return _cached_pack(w, ("panels_t" if transposed else "panels", width), make)


_HALF_GEMM: dict[torch.dtype, bool] = {}  # whether oneDNN has a native GEMM for a half type here


def half_gemm_native(dtype: torch.dtype) -> bool:
    """This CPU runs ``dtype`` (bfloat16 / float16) GEMMs natively (AVX512-BF16 / AMX /
    AVX512-FP16, as oneDNN reports). Without, torch emulates them, ~9x slower than float32
    (measured: (3200, 128) x (128, 1024) in bfloat16 on an AVX2 CPU)."""
    if dtype not in _HALF_GEMM:
        check = {torch.bfloat16: "_is_mkldnn_bf16_supported",
                 torch.float16: "_is_mkldnn_fp16_supported"}[dtype]
        try:
            _HALF_GEMM[dtype] = bool(getattr(torch.ops.mkldnn, check)())
        except (AttributeError, RuntimeError):
            _HALF_GEMM[dtype] = False
    return _HALF_GEMM[dtype]


def input_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, w)`` for the input term of all steps (x: (T, B, I)). On one thread, in
    float32 on the CPU, through the C kernels' GEMM (``_NativeLinear``; with more threads MKL's
    threaded GEMM is faster); else without autograd through oneDNN with w packed once and cached
    (measured ~25-30% faster than F.linear's MKL GEMM at (3200, 128) x (128, 1024)). Under
    torch.compile it is ``F.linear`` (the compiler picks its own kernel). On a CPU without
    native half GEMMs a bfloat16 / float16 product (half tensors, or under autocast) is computed
    in float32 and rounded to the half type once: the dtype torch's rules give (autocast's for
    linear), the accuracy of a float32 accumulation, and the speed of a float32 GEMM."""
    if torch.compiler.is_compiling():
        return torch.nn.functional.linear(x, w)
    device = x.device.type
    autocast = autocast_on(x)                  # False on a device without autocast (meta)
    half = torch.get_autocast_dtype(device) if autocast else x.dtype
    if device == "cpu" and half in (torch.bfloat16, torch.float16) and not half_gemm_native(half) \
            and (autocast or w.dtype == x.dtype):
        with torch.autocast(device, enabled=False):
            return input_linear(x.float(), w.float()).to(half)
    if not autocast and torch.get_num_threads() == 1 and x.dim() == 3 and _native_applies(x, w):
        return _NativeLinear.apply(x, w)
    if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)) and not autocast:
        packed = _packed_weight(w, x.shape[0] * x.shape[1])
        if packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")
    return torch.nn.functional.linear(x, w)


def _native_applies(x: torch.Tensor, w: torch.Tensor) -> bool:
    """The C kernels' GEMM can compute x @ w.T: eager float32 CPU tensors (``native.eager``),
    w's rows a whole number of panels."""
    if x.dtype != torch.float32 or w.dtype != torch.float32 or not native.eager(x, w):
        return False
    lib = native.native_lib(x)
    return w.shape[0] % lib.panel_width() == 0 and 0 < x.numel() < 2 ** 31


class _NativeLinear(torch.autograd.Function):
    """``F.linear(x, w)`` for x (T, B, K) through the C kernels' GEMM (one thread; measured at
    (1600, 64) x (64, 512), the input term of T, B = 200, 8 and H = 128: 1.6 ms against 2.5 for
    MKL's, 2.1 for oneDNN's); the backward in torch ops: dx = dy @ w, dw = dy^T x."""

    @staticmethod
    def forward(x, w):
        lib = native.native_lib(x)
        N, K = w.shape
        a = x.detach().reshape(-1, K).contiguous()
        wp = _panels(w, lib.panel_width())
        y = x.new_empty(*x.shape[:-1], N)
        lib.gemm_packed(a.shape[0], K, a.data_ptr(), wp.data_ptr(), wp.shape[0], y.data_ptr())
        return y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        flat = dy.reshape(-1, w.shape[0])
        dx = torch.mm(flat, w).view_as(x) if ctx.needs_input_grad[0] else None
        dw = torch.mm(flat.t(), x.reshape(-1, w.shape[1])) if ctx.needs_input_grad[1] else None
        return dx, dw


# ---- checks, dtypes and the per-step views

def check_shapes(who: str, xg, states: dict, w_hh, gates: int,
                 vectors: dict) -> tuple[int, int, int]:
    """Shapes (and one device) of the arguments of ``ln_*_sequence`` -> (T, B, H)."""
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
    if len({t.device for t in tensors}) != 1 or (
            len(dtypes) != 1 and not autocast_on(xg)):
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


def dtypes(xg: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, output dtype). As torch.nn.LSTM: under autocast the result is in the
    autocast dtype, else in xg's. On the CPU half types compute in float32 (converted once per
    call; the statistics are float32 either way), so the C kernels run them."""
    device = xg.device.type
    autocast = autocast_on(xg) and xg.dtype != torch.float64  # as torch casts
    out = torch.get_autocast_dtype(device) if autocast else xg.dtype
    compute = torch.float32 if device == "cpu" and out in _HALF else out
    return compute, out


def under_functorch() -> bool:
    """Inside a torch.func transform (grad, jacrev, vmap, ...) in eager mode (torch.compile
    traces the operators)."""
    return (not torch.compiler.is_compiling()
            and torch._C._functorch.peek_interpreter_stack() is not None)


def with_order(fn, order, xg: torch.Tensor, states: tuple):
    """Run ``fn(xg, *states)`` on the batch sorted by decreasing length; results back in order."""
    if order is None:
        return fn(xg, *states)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())
    order_d, inverse_d = order.to(xg.device), inverse.to(xg.device)
    out, *finals = fn(xg.index_select(1, order_d), *(s.index_select(0, order_d) for s in states))
    return (out.index_select(1, inverse_d), *(f.index_select(0, inverse_d) for f in finals))


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


NO_KERNELS = ("the C kernels are not available in this process (the operator was traced or "
              "exported where they were); run the module eagerly, where it falls back to the "
              "reference loop, or build the kernels here (docs/rnnfast.md)")


def call(op, body, *args):
    """``op(*args)``, or its ``body(*args)`` where ``eager`` holds (a backward operator: no
    autograd of its own at first order)."""
    return body(*args) if native.eager(*args) else op(*args)


def forward(forward_native, who, n_buffers, xw, *rest):
    """Run a forward operator on the C kernels -> (*states, *saved). ``forward_native`` returns
    (*states, saved or None); without ``save`` the saved buffers are empty (``n_buffers`` of xw's
    dtype and the statistics)."""
    lib = native.native_lib(xw)
    if lib is None:
        raise RuntimeError(f"layernorm::{who}: {NO_KERNELS}.")
    with torch.autocast(xw.device.type, enabled=False):
        *states, saved = forward_native(lib, xw.contiguous(), *rest)
    if saved is None:
        saved = [xw.new_empty(0) for _ in range(n_buffers)]
        saved.append(xw.new_empty(0, dtype=stats_dtype(xw.dtype)))
    return (*states, *saved)


def backward(who, xw, backward_native, args):
    """Run a backward operator on the C kernels."""
    lib = native.native_lib(xw)
    if lib is None:
        raise RuntimeError(f"layernorm::{who}: {NO_KERNELS}.")
    with torch.autocast(xw.device.type, enabled=False):
        return backward_native(lib, *args)


def run_sequence(who, run_op, loop, groups, xg, states, params, gain_x, bias_x, masks, order,
                 batch_sizes, eps, out_dtype):
    """``ln_*_sequence`` after its checks, on tensors in the compute dtype: the one choice of
    path. The registered operator (``run_op``, from ``register_autograd``) where the C kernels
    run; elsewhere (float64, no C compiler, ``USE_NATIVE = False``, CUDA without Triton, and
    under torch.func transforms) the cell's reference ``loop`` under ordinary autograd. ->
    (out, *final states) in the batch's order, in ``out_dtype``."""
    n = len(states)
    if under_functorch() or native.native_lib(xg) is None:
        sizes = None if batch_sizes is None else batch_sizes.tolist()
        xg, _, _ = input_ln(who, xg, gain_x, bias_x, groups, eps, inside=False)

        def run(xg_, *states_):
            return loop(xg_, *states_, *params, sizes, eps, *masks)
    else:
        input_ln(who, xg, gain_x, bias_x, groups, eps, inside=True)  # checks the pair
        save = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (xg, *states, *params, gain_x, bias_x))

        def run(xg_, *states_):
            return run_op(xg_, *states_, *params, gain_x, bias_x, *masks, batch_sizes,
                          float(eps), save)[:n + 1]
    outs = with_order(run, order, xg, states)
    return tuple(o.to(out_dtype) for o in outs)


# The backward kernels run over the sequence in ranges of at most this many bytes of ``dhg`` (the
# gradient of W_hh h_{t-1}) and a quarter of the steps, each range followed by its share of dW_hh
# as one GEMM: dhg is then held for one range, not for all T steps (a (T, B, G) buffer, as large
# as xw).
CHUNK_BYTES = 2 << 20


def native_backward(lib, kernel, cls, who, h0, out, batch_sizes, G, h_mask=None, **fields):
    """Run the backward C ``kernel`` latest steps first, one range of steps per call, and
    accumulate dW_hh = sum_t dhg_t^T h_{t-1} (h_{t-1}: h0 at t = 0, else out[t - 1], times
    ``h_mask`` when given) -> dW_hh (G, H). ``fields``: the rest of the kernel's arguments, as
    ``native.call``."""
    T, B, H = out.shape
    steps = max(1, min(-(-T // 4), CHUNK_BYTES // max(1, 4 * B * G)))  # >= 4 ranges
    buf = _WORKSPACE.get((steps, B, G), like=out)
    dw = out.new_zeros(G, H)
    sizes = native.int32(batch_sizes)
    for hi in range(T, 0, -steps):
        lo = max(0, hi - steps)
        dhg = buf[:hi - lo]
        if batch_sizes is not None:  # the kernel writes only the rows that run
            dhg.zero_()
        native.call(lib, kernel, cls, who, t0=lo, t1=hi, h0=h0, out=out,
                     batch_sizes=sizes, dhg=dhg, h_mask=h_mask, **fields)
        flat = dhg.view(-1, G)
        if lo:
            dw.addmm_(flat.t(), masked_h(out[lo - 1:hi - 1], h_mask).reshape(-1, H))
        else:
            dw.addmm_(flat[B:].t(), masked_h(out[:hi - 1], h_mask).reshape(-1, H)).addmm_(
                flat[:B].t(), masked_h(h0, h_mask))
    return dw


def fake_saved(xw, save):
    """For a fake forward: ``new(*shape, dtype=)`` gives a saved buffer of that shape (empty
    without ``save``); ``new_stats(*shape)`` the statistics."""
    def new(*shape, dtype=xw.dtype):
        return xw.new_empty(shape if save else (0,), dtype=dtype)

    def new_stats(*shape):
        return new(*shape, dtype=stats_dtype(xw.dtype))
    return new, new_stats


def register_autograd(op, body, name, n_states, loop, first_order):
    """Register the autograd of ``op`` (inputs: ``*tensors, batch_sizes, eps, save``; outputs:
    out (T, B, H), ``n_states - 1`` final states and the saved buffers) -> a function
    with op's arguments that calls ``op``, or its ``body`` with the same autograd where ``eager``
    holds.

    ``loop(*tensors, batch_sizes, eps)``: the cell's differentiable loop (input LN included),
    -> (out, *final states); used for second order (``create_graph=True``).
    ``first_order(tensors, batch_sizes, out, saved, grads)``: the grads of ``tensors`` through the
    cell's backward operator, ``grads`` = (grad of out, *grads of the final states), None where
    not needed."""
    def setup_context(ctx, inputs, output):
        *tensors, batch_sizes, eps, save = inputs
        out, saved = output[0], output[n_states:]
        ctx.mark_non_differentiable(*saved)
        ctx.set_materialize_grads(False)
        ctx.eps, ctx.save, ctx.n_tensors = eps, save, len(tensors)
        ctx.save_for_backward(*tensors, batch_sizes, out, *saved)

    def backward_(ctx, grad_out, *grad_rest):
        n, kept = ctx.n_tensors, ctx.saved_tensors
        tensors, batch_sizes, out, saved = kept[:n], kept[n], kept[n + 1], kept[n + 2:]
        grads = (grad_out, *grad_rest[:n_states - 1])
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph=True
            found = _second_order(ctx, tensors, batch_sizes, grads, loop)
        else:
            if not ctx.save:
                raise RuntimeError(f"layernorm::{name} was called with save=False, so it kept "
                                   "nothing for the backward; call it with save=True when "
                                   "gradients are needed.")
            found = first_order(tensors, batch_sizes, out, saved, grads)
        return (*found, None, None, None)  # batch_sizes, eps, save

    op.register_autograd(backward_, setup_context=setup_context)
    setup = setup_context

    class Eager(torch.autograd.Function):
        """``body`` with op's autograd."""
        @staticmethod
        def forward(*inputs):
            return body(*inputs)

        setup_context = staticmethod(setup)
        backward = staticmethod(backward_)

    def run(*inputs):
        return Eager.apply(*inputs) if native.eager(*inputs) else op(*inputs)
    return run


def _second_order(ctx, inputs, batch_sizes, grads, loop):
    """The backward as a differentiable function of the inputs and of the output gradients:
    re-run the forward as ``loop`` and differentiate it with ``create_graph=True``."""
    return differentiable_backward(lambda *xs: loop(*xs, batch_sizes, ctx.eps), inputs,
                                   ctx.needs_input_grad, grads)


def reference_grads(loop, n_states: int, inputs: tuple, lens, eps: float, masks: tuple,
                    needs_input_grad, grads: tuple) -> list:
    """The Triton kernels' backward under ``create_graph=True`` (a gradient that autograd
    differentiates again): the gradients of the reference recurrence (``layernorm.recurrence``'s
    step in its loop, the same function the CPU operators differentiate for second order) as
    differentiable functions of ``inputs`` (the autograd Function's tensors, ``xg`` first, then the states, ``w_hh`` and
    the LN parameters) and of ``grads`` (of out and the final states; None where not needed).
    ``loop``: the operator's reference loop with input LN, ``n_states``: 2 (LSTM) or 1 (GRU).
    ``lens``: (B,) lengths in the batch's order or None; ``masks``: the regularizers' masks, in
    the batch's order. -> one gradient or None per input."""
    from ..recurrence.lengths import from_lengths
    xg = inputs[0]
    T, B = xg.shape[:2]
    order, batch_sizes = from_lengths(None if lens is None else lens.cpu(), T, B)
    compute = stats_dtype(xg.dtype)        # as the kernels: float32 arithmetic for half types
    masks = prepare_masks(masks, compute, order)

    def reference(*tensors):
        xg_, *rest = (None if t is None else t.to(compute) for t in tensors)
        states, params = rest[:n_states], rest[n_states:]
        outs = with_order(lambda x, *s: loop(x, *s, *params, *masks, batch_sizes, eps),
                          order, xg_, tuple(states))
        return tuple(o.to(xg.dtype) for o in outs)
    return differentiable_backward(reference, inputs, needs_input_grad, grads)
