"""The GEMMs of the recurrent operators: the input term of all steps (``input_linear``: the C
kernels' GEMM on torch's threads, oneDNN's packed linear, or ``F.linear``), the C kernels' panel
layout of a weight (``_panels``) and the cache of packed weights they share."""
from __future__ import annotations

import ctypes
import sys
import threading
import weakref

import torch

from . import native
from .native import half_gemm_native

_PACKED_OK: bool | None = None  # whether oneDNN's packed linear works here (checked once)
# the operators' buffer pool (``common._Workspace``), set by ``common``, which imports this
# module: ``input_linear(..., pooled=True)`` writes into it
POOL = None


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
# are compared, since edits through ``w.data`` do not bump the version: with a kept copy (one
# memcmp), or where the copy is not current, with the float32 panels themselves
# (``_cached_pack``): (id(w), kind) -> (weakref to w, (data_ptr, version), copy of w or None,
# packed, whether the copy is current), the most recently used last.
# An entry leaves when its tensor is freed: a half-type module's weights arrive as a fresh
# float32 copy per call, and the entries of those dead copies (a copy of W_hh and its panels
# each) held 24 MiB at (I, H) = (128, 256) after a few bf16 training steps.
_PACK_CACHE: dict[tuple, tuple] = {}
_PACK_CACHE_SIZE = 16


def _forget(cache_key):
    """A weakref callback: drop the entry of a freed tensor (unless a newer one took the key)."""
    def callback(ref):
        entry = _PACK_CACHE.get(cache_key)
        if entry is not None and entry[0] is ref:
            del _PACK_CACHE[cache_key]
    return callback


_memcmp = ctypes.CDLL(None).memcmp
_memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_memcmp.restype = ctypes.c_int


def _memcpy_fits(kept: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether w's bits and the kept copy's can be compared and copied as plain memory."""
    return (w.device.type == kept.device.type == "cpu" and w.is_contiguous()
            and w.dtype == kept.dtype and w.shape == kept.shape and not w.is_conj()
            and not w.is_neg())


def _same_bits(kept: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether w holds the kept copy's bits (the packed form made from them is still w's): one
    memcmp where w is a contiguous CPU tensor (~1 us against torch.equal's 9-22 us at (256, 64),
    which also counts NaN weights as changed), else torch.equal."""
    if _memcpy_fits(kept, w):
        return _memcmp(kept.data_ptr(), w.data_ptr(), w.numel() * w.element_size()) == 0
    return torch.equal(kept, w)


def _refs_of_a_local() -> int:
    """``sys.getrefcount`` of a tensor that one local variable alone holds (2 on CPython 3.11;
    an interpreter that borrows references for the call counts fewer)."""
    probe = torch.empty(0)
    return sys.getrefcount(probe)


_LOCAL_REFS = _refs_of_a_local()


def _copy_of(w: torch.Tensor, kept):
    """A copy of w's values: into ``kept`` where it fits (no fresh buffer), else a new one."""
    if kept is not None and _memcpy_fits(kept, w):
        ctypes.memmove(kept.data_ptr(), w.data_ptr(), w.numel() * w.element_size())
        return kept
    return w.detach().clone()


def _unchanged(entry: tuple, w: torch.Tensor, same):
    """The cache entry, its copy of w made current, where its packed form still holds w's
    values; else None."""
    ref, key, kept, packed, current = entry
    if current:
        return entry if _same_bits(kept, w) else None
    if same is None or not same(packed, w.detach().contiguous()):
        return None
    return ref, key, _copy_of(w, kept), packed, True  # (later calls: one memcmp)


def _cached_pack(w: torch.Tensor, kind, make, same=None):
    """``make(w, spare)`` (a packed form of w, ``kind`` names the form), cached while w is
    unchanged and alive. ``spare``: the stale entry's packed tensor where nothing but the cache
    held it (make may write into it; else None), so that a training step, whose updated weights
    are packed again, reuses the buffers of the last: fresh ones (1 MB at W_hh (1024, 256)),
    allocated while the old were alive, came from the OS at a page fault per 4 KB.

    ``same(packed, wc)`` (wc: w contiguous): whether a packed form still holds w's bits, where
    it holds them all (the float32 panels). A pack then leaves the entry's copy of w stale: a
    training step, whose updated weights change the version, never reads it. A call with an
    unchanged version compares w with the packed form itself once (~3x a memcmp's time) and
    makes the copy current, so that the calls after it compare with one memcmp."""
    if w._base is not None:  # a transient view (the backward's w.t()): pack, do not cache
        return make(w.detach().contiguous(), None)
    # inference tensors have no version counter: the values alone tell a changed weight
    key = (w.data_ptr(), -1 if w.is_inference() else w._version)
    cache_key = (id(w), kind)
    hit = _PACK_CACHE.pop(cache_key, None)
    if hit is not None and hit[0]() is w and hit[1] == key:
        entry = _unchanged(hit, w, same)
        if entry is not None:
            _PACK_CACHE[cache_key] = entry
            return entry[3]
    kept = spare = None
    if hit is not None:
        kept, spare = hit[2], hit[3]
        del hit
        if sys.getrefcount(spare) > _LOCAL_REFS:  # a caller still holds it
            spare = None
    packed = make(w.detach().contiguous(), spare)
    current = same is None
    if current:
        kept = _copy_of(w, kept)
    if len(_PACK_CACHE) >= _PACK_CACHE_SIZE:
        _PACK_CACHE.pop(next(iter(_PACK_CACHE)))
    _PACK_CACHE[cache_key] = (weakref.ref(w, _forget(cache_key)), key, kept, packed, current)
    return packed


def _packed_weight(w: torch.Tensor, batch: int):
    """oneDNN's packed form of w (G, K) for inputs of ``batch`` rows, or None when it does not
    apply (not CPU float32, product too small, oneDNN unavailable)."""
    if (w.device.type != "cpu" or w.dtype != torch.float32
            or batch * w.numel() < _PACKED_MIN_FLOPS or not _packed_available()):
        return None
    return _cached_pack(w, ("onednn", batch),
                        lambda wc, spare: torch.ops.mkldnn._reorder_linear_weight(wc, batch))


def _panels(w: torch.Tensor, width: int, transposed: bool = False) -> torch.Tensor:
    """w (G, K) in the C kernel's layout: (ceil(G / width), K, width) column panels,
    panels[p, k, c] = w[p * width + c, k], zero rows padding G (``_rnn_steps.c``, gemm_rows).
    ``transposed``: the panels of w.t() (the backward's W_hh^T), made from w itself and cached
    with it. Either is one pass over w: the C kernels' ``pack_panels`` for float32 at their own
    width, on torch's threads, into the stale entry's buffer where it is free (``_cached_pack``,
    which then compares w with the panels themselves), else a strided copy in torch. Measured in
    training steps (an SGD step after each, LN-LSTM, 2 threads, steps of both versions
    interleaved, two runs): the packs of W_hh, W_hh^T and W_x took 0.44-0.55 ms a step against
    0.72-1.40 ms made by torch's copies with a copy of each weight kept, at (T, B, I, H) =
    (100, 8, 16 and 32, 128, 256) and (35, 20, 200, 200)."""
    lib = native.loaded("pack_panels")  # (its callers run the C kernels)
    c_packs = w.dtype == torch.float32 and width == lib.panel_width() and w.dim() == 2

    def shape(G, K):
        return (-(-(K if transposed else G) // width), G if transposed else K, width)

    def same(packed, wc):
        return packed.shape == shape(*wc.shape) and packed.dtype == wc.dtype and not \
            lib.pack_panels(*wc.shape, wc.data_ptr(), int(transposed), packed.data_ptr(), 1, 1)

    def make(wc, spare):
        G, K = wc.shape
        if c_packs:
            out = spare if spare is not None and spare.shape == shape(G, K) \
                and spare.dtype == wc.dtype else wc.new_empty(shape(G, K))
            lib.pack_panels(G, K, wc.data_ptr(), int(transposed), out.data_ptr(), 0,
                            torch.get_num_threads() if G * K >= _THREADED_PACK else 1)
            return out
        if transposed:  # panels[p, g, c] = w[g, p * width + c]
            pad = -K % width
            wc = torch.nn.functional.pad(wc, (0, pad)) if pad else wc
            return wc.reshape(G, -1, width).transpose(0, 1).contiguous()
        pad = -G % width
        wc = torch.nn.functional.pad(wc, (0, 0, 0, pad)) if pad else wc
        return wc.reshape(-1, width, K).transpose(1, 2).contiguous()
    return _cached_pack(w, ("panels_t" if transposed else "panels", width), make,
                        same if c_packs else None)


# weights of at least this many floats are packed on torch's threads
_THREADED_PACK = 2 ** 16


def _panels_bf16(w: torch.Tensor, width: int, transposed: bool = False) -> torch.Tensor:
    """w (G, K) rounded to bfloat16 (to nearest even) in the C kernels' panels over pairs of k:
    (ceil(G / width), ceil(K / 2), width, 2), panels[p, k // 2, c, k % 2] = w[p * width + c, k],
    zeros padding G and an odd K (``_rnn_steps_gemm.c``, gemm_rows_bf16); cached with w.
    ``transposed``: the panels of w.t() (the backward's W_hh^T), made from w and cached with it."""
    def make(wc, spare):
        wb = wc.to(torch.bfloat16)
        if transposed:  # panels[p, g // 2, c, g % 2] = w[g, p * width + c]: one copy
            wb = torch.nn.functional.pad(wb, (0, -wb.shape[1] % width, 0, wb.shape[0] % 2))
            return wb.view(wb.shape[0] // 2, 2, -1, width).permute(2, 0, 3, 1).contiguous()
        wb = torch.nn.functional.pad(wb, (0, wb.shape[1] % 2, 0, -wb.shape[0] % width))
        return wb.reshape(-1, width, wb.shape[1] // 2, 2).transpose(1, 2).contiguous()
    return _cached_pack(w, ("panels_bf16_t" if transposed else "panels_bf16", width), make)


def recurrent_panels(lib, w_hh: torch.Tensor, bf16: bool, transposed: bool = False) -> dict:
    """The recurrent weight as a sequence kernel's struct field for the training path's
    operators: where the caller computes in bfloat16 (``bf16``: the operators' flag) and the
    loaded kernels have the CPU's bfloat16 dot products (``bf16_dot``), W_hh in bfloat16 panels:
    the forward's (``wpb``: the product W_hh h_{t-1} reads h_{t-1} rounded to bfloat16, as the
    inference kernels and torch's bfloat16 LSTM do) and the backward's W_hh^T (``wtpb``: the
    product dhg_t W_hh reads dhg_t rounded to bfloat16), float32 accumulation; else float32
    panels (``wp`` / ``wtp``).

    Both directions take the same bfloat16 W_hh, so the backward's dh_{t-1} = dhg_t W_hh is the
    gradient of the product the forward computed, and dW_hh (``WeightGrad``) reads the rounded
    h_{t-1} where it runs in bfloat16. The forward's rounding of h_{t-1} measured no farther from
    the float64 module than rounding W_x x alone (docs/rnnfast.md, "bf16 training")."""
    if bf16 and lib.bf16_dot():
        return {"wtpb" if transposed else "wpb": _panels_bf16(w_hh, lib.panel_width(),
                                                             transposed)}
    return {"wtp" if transposed else "wp": _panels(w_hh, lib.panel_width(), transposed)}


# products below this many multiply-adds run on one thread: splitting them costs more than the
# fork of the threads (a few microseconds) saves
_THREADED_MIN_MADDS = 2 ** 20


def gemm_threads(m: int, k: int, n: int) -> int:
    """Threads for one C kernels' GEMM of m x k x n multiply-adds: torch's count, or one for a
    small product."""
    return torch.get_num_threads() if m * k * n >= _THREADED_MIN_MADDS else 1


def _mm_packed(lib, a: torch.Tensor, wp: torch.Tensor, n: int) -> torch.Tensor:
    """a (M, K) float32 contiguous @ W^T through the C kernels' GEMM (torch's threads), W (n, K) in
    panels ``wp`` (``_panels``) -> (M, n) (a view where n is not a whole number of panels)."""
    y = a.new_empty(a.shape[0], wp.shape[0] * lib.panel_width())
    lib.gemm_packed(a.shape[0], a.shape[1], a.data_ptr(), wp.data_ptr(), wp.shape[0],
                    y.data_ptr(), gemm_threads(a.shape[0], a.shape[1], y.shape[1]))
    return y[:, :n]


# rows of d per product in ``WeightGrad``: h's panels of a range stay in cache (measured, one
# thread, (3200, 1024)^T x (3200, 128), with the sums: 7.1 ms in one product, 5.9 ms in ranges
# of 512 rows, 10.5 ms through torch.mm)
_WEIGHT_GRAD_ROWS = 512


_SCRATCH = threading.local()  # per Python thread: ``_scratch``'s buffer


def _scratch(numel: int) -> torch.Tensor:
    """A float32 CPU buffer of at least ``numel`` elements for the duration of one C call
    (``WeightGrad.add``'s panels of h), kept per Python thread and grown as needed: allocated
    anew at every call, a buffer of this size (512 KB at 512 rows x 256) comes fresh from the OS
    and costs a page fault per 4 KB (measured 1.73 against 1.47 ms for the call at (512, 1024)^T
    x (512, 256), 2 threads). Not the operators' pool (``common._Workspace``): the weight
    gradients run below it (``common.native_backward``), and this buffer never outlives the
    call."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.numel() < numel:
        with torch.inference_mode(False):
            buf = _SCRATCH.buf = torch.empty(numel)
    return buf


class WeightGrad:
    """A weight gradient summed over ranges of steps: dW (N, K) = sum of d^T h over the ``add``
    calls (d (M, N), h (M, K) float32 rows of one range), -> ``result()``, float32.

    Where ``bf16`` (the caller computes in bfloat16: the operators' flag) and this CPU has a
    native bfloat16 GEMM (``half_gemm_native``): each range as one bfloat16 product (float32
    accumulation inside, rounded to bfloat16 once) added in float32, measured ~4x faster than
    float32 for dW_hh at (T, B, H) = (100, 32, 256) on AVX512-BF16. Else through the C kernels'
    GEMM on torch's threads (``gemm_packed_at``, one call: d read in place as A^T, h^T packed
    into panels there, ``_WEIGHT_GRAD_ROWS`` rows at a time; the threads split dW's columns or
    rows; each range's sums continue from dW's values, with no product of its own to add):
    measured 1.9 ms against 3.0 ms for torch's addmm_ for a (1024, 512) x (512, 256) range, one
    thread, AVX-512 (torch's float32 GEMM ran ~95 GFLOP/s there, the C kernels' ~220;
    docs/rnnfast.md, "Two threads")."""

    def __init__(self, lib, n: int, k: int, like: torch.Tensor, bf16: bool = False):
        self.lib, self.k = lib, k
        self.half = bf16 and half_gemm_native(torch.bfloat16)
        if self.half:
            self.acc = like.new_zeros(n, k)
        else:  # its columns a whole number of panels
            width = lib.panel_width()
            self.acc = like.new_zeros(n, -(-k // width) * width)

    def add(self, d: torch.Tensor, h: torch.Tensor) -> None:
        if d.shape[0] == 0:  # a range of no rows (an empty batch)
            return
        if self.half:
            self.acc.add_(torch.mm(d.t().to(torch.bfloat16), h.to(torch.bfloat16)))
            return
        d, h = d.contiguous(), h.contiguous()  # (held here while the C call reads them)
        (K, M), N, rows = d.shape, h.shape[1], min(d.shape[0], _WEIGHT_GRAD_ROWS)
        panels = _scratch(rows * self.acc.shape[1])  # h^T's panels of a range, packed there
        if self.lib.gemm_packed_at(M, K, d.data_ptr(), h.data_ptr(), N, N, panels.data_ptr(),
                                   self.acc.data_ptr(), gemm_threads(rows, M, self.acc.shape[1]),
                                   1, _WEIGHT_GRAD_ROWS):
            raise MemoryError(f"the C kernels' GEMM could not allocate its buffers of "
                              f"{rows} x 12 floats")

    def result(self) -> torch.Tensor:
        return self.acc if self.half else self.acc[:, :self.k].contiguous()


def input_linear(x: torch.Tensor, w: torch.Tensor, pooled: bool = False) -> torch.Tensor:
    """``F.linear(x, w)`` for the input term of all steps (x: (T, B, I)). In float32 on the CPU,
    through the C kernels' GEMM (``_NativeLinear``, on torch's threads); else without autograd
    (and no torch.func transform or forward-mode AD, whose tangents it would drop) through oneDNN
    with w packed once and cached (measured ~25-30% faster than F.linear's MKL GEMM at
    (3200, 128) x (128, 1024)). Outside eager mode (torch.compile, export, tracing;
    ``native.where``) it is ``F.linear`` (the compiler picks its own kernel). On a CPU without
    native half GEMMs a bfloat16 / float16 product (half tensors, or under autocast) is computed
    in float32 and rounded to the half type once: the dtype torch's rules give (autocast's for
    linear), the accuracy of a float32 accumulation, and the speed of a float32 GEMM.

    ``pooled`` (for a caller whose result only feeds the recurrent operators, never the user):
    the C kernels' product is written into a buffer of the operators' pool, reused once free, and
    the operators' gradient of it likewise (``common._Workspace``): a (T, B, G) buffer fresh from
    the OS costs a page fault per 4 KB at first touch (measured ~1,400 of them per training step
    of the LN-LSTM at (T, B, I, H) = (100, 32, 128, 256), 2 threads: 59.7 -> 57.6 ms a step,
    interleaved medians)."""
    where = native.where(x, w)                # asked once, here
    return _LINEAR[where.linear(x, w)](x, w, where, pooled)


def _linear_in_float32(x, w, where, pooled):
    with torch.autocast(x.device.type, enabled=False):
        return input_linear(x.float(), w.float()).to(where.dtype(x))


def _linear_packed(x, w, where, pooled):
    packed = _packed_weight(w, x.shape[0] * x.shape[1])
    if packed is None:      # (too small a product, or oneDNN's packed linear not working here)
        return torch.nn.functional.linear(x, w)
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")


# ``native.Where.linear``'s paths
_LINEAR = {"linear": lambda x, w, where, pooled: torch.nn.functional.linear(x, w),
           "float32": _linear_in_float32,
           "c": lambda x, w, where, pooled: _NativeLinear.apply(x, w, pooled),  # (w: whole panels)
           "packed": _linear_packed}


class _NativeLinear(torch.autograd.Function):
    """``F.linear(x, w)`` for x (T, B, K) through the C kernels' GEMM (torch's threads; measured at
    (1600, 64) x (64, 512), the input term of T, B = 200, 8 and H = 128: 1.6 ms against 2.5 for
    MKL's, 2.1 for oneDNN's); the backward in torch ops: dx = dy @ w, dw = dy^T x."""

    @staticmethod
    def forward(ctx, x, w, pooled):  # (ctx here, not setup_context: apply binds no signature
        lib = native.load()  # per call; eager mode only, never under torch.func: input_linear)
        N, K = w.shape
        a = x.detach().reshape(-1, K).contiguous()
        wp = _panels(w, lib.panel_width())
        if pooled and POOL is not None:
            y = POOL.get((*x.shape[:-1], N), like=x)
        else:
            y = x.new_empty(*x.shape[:-1], N)
        lib.gemm_packed(a.shape[0], K, a.data_ptr(), wp.data_ptr(), wp.shape[0], y.data_ptr(),
                        gemm_threads(a.shape[0], K, N))
        ctx.save_for_backward(x, w)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        flat = dy.reshape(-1, w.shape[0])
        if torch.is_grad_enabled():  # create_graph=True: differentiable torch ops
            dx = torch.mm(flat, w).view_as(x) if ctx.needs_input_grad[0] else None
            dw = torch.mm(flat.t(), x.reshape(-1, w.shape[1])) if ctx.needs_input_grad[1] \
                else None
            return dx, dw, None
        # else the C kernels' GEMM, ~2x torch's float32 GEMM here (``WeightGrad``)
        lib = native.load()
        dx = dw = None
        flat = flat.contiguous()
        if ctx.needs_input_grad[0]:
            wtp = _panels(w, lib.panel_width(), transposed=True)
            dx = _mm_packed(lib, flat, wtp, w.shape[1]).reshape(x.shape)
        if ctx.needs_input_grad[1]:
            grad = WeightGrad(lib, *w.shape, flat)
            grad.add(flat, x.reshape(-1, w.shape[1]))
            dw = grad.result()
        return dx, dw, None
