"""Fused whole-sequence LN-LSTM and LN-GRU recurrences with a hand-derived backward.

The readable LN-LSTM/LN-GRU (``layernorm.rnn``) runs one autograd graph per time step: at the sizes
people train (B = 32, H = 256) the time goes to per-op Python/autograd overhead, not to arithmetic.
Here one ``torch.autograd.Function`` covers the whole sequence of one layer and one direction:

* the forward loop runs without autograd and keeps only what the backward needs;
* the backward loop computes the gradients of every step by hand and leaves everything that does
  not feed the recurrence to after the loop: the weight gradient ``dW_hh`` is ONE GEMM over all
  steps, the LN gains/biases gradients are accumulated on the way;
* the gradient of the input term comes back as one (T, B, G) tensor, so ``W_x`` backpropagates
  through ordinary autograd.

On the CPU in float32 the forward and backward loops each run in ONE call of a small C kernel
(``_rnn_steps.c``: its own register-tiled recurrent GEMM, the input LN folded into the step,
examples split over threads for the whole sequence) with their sequence buffers reused across
calls (``_Workspace``). Elsewhere (CUDA, float64, half types, no C compiler, ``USE_NATIVE =
False``) the same loops run in torch ops.

Variable-length batches run like cuDNN packed sequences: examples are ordered by decreasing length
and step t only touches the ``batch_sizes[t]`` examples still running, so padding costs nothing.

Two cheap identities keep the torch-ops step short on CPU (where ``torch.tanh`` is several times
slower than ``torch.sigmoid``): ``tanh(x) = 2 sigmoid(2x) - 1``, with the factor 2 folded into the
LN gain and bias, so every gate needs one sigmoid over the whole gate vector and the backward uses
the one derivative ``s (1 - s)``. Its recurrent GEMM uses oneDNN with the weight packed once per
call when available (CPU, float32), ``torch.mm`` otherwise.

Equations (PAPER.md section 2) and gate order: see ``ln_lstm_sequence`` and ``ln_gru_sequence``.
"""
from __future__ import annotations

import math
import weakref

import torch
from torch.autograd.function import once_differentiable

from .. import kernels as _kernels

__all__ = ["ln_lstm_sequence", "ln_gru_sequence"]

_layer_norm = torch.native_layer_norm
_layer_norm_backward = torch.ops.aten.native_layer_norm_backward


# ---------------------------------------------------------------------------------------------
# The recurrent GEMM  h @ w.T  (w: (G, H)), reused many times per call with the same w
# ---------------------------------------------------------------------------------------------

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
    key = (w.data_ptr(), w._version)
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


def _panels(w: torch.Tensor, width: int) -> torch.Tensor:
    """w (G, K) in the C kernel's layout: (ceil(G / width), K, width) column panels,
    panels[p, k, c] = w[p * width + c, k], zero rows padding G (``_rnn_steps.c``, gemm_rows)."""
    def make(wc):
        G, K = wc.shape
        pad = -G % width
        return torch.nn.functional.pad(wc, (0, 0, 0, pad)).reshape(-1, width, K) \
            .transpose(1, 2).contiguous()
    return _cached_pack(w, ("panels", width), make)


def input_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, w)`` for the input term of all steps (x: (T, B, I)); without autograd on the
    CPU in float32 through oneDNN with w packed once and cached (measured ~25-30% faster than
    F.linear's MKL GEMM at (3200, 128) x (128, 1024))."""
    if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
        packed = _packed_weight(w, x.shape[0] * x.shape[1])
        if packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")
    return torch.nn.functional.linear(x, w)


class _Linear:
    """``y = h @ w.T`` for a fixed ``w`` (G, K) and inputs of at most ``batch`` rows."""

    def __init__(self, w: torch.Tensor, batch: int):
        self.wt = w.t()
        self.packed = _packed_weight(w, batch)

    def __call__(self, h: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if self.packed is not None:
            y = torch.ops.mkldnn._linear_pointwise(h, self.packed, None, "none", [], "")
            return y if out is None else out.copy_(y)
        return torch.mm(h, self.wt, out=out) if out is not None else torch.mm(h, self.wt)


# ---------------------------------------------------------------------------------------------
# Lengths: batch sizes per step after ordering by decreasing length
# ---------------------------------------------------------------------------------------------

def _prepare_lengths(lengths, T: int, B: int):
    """-> (order or None, batch_sizes list or None, last-step blocks).

    ``order`` sorts the batch by decreasing length (None when already sorted); ``batch_sizes[t]``
    is how many examples are still running at step t (None: all of them at every step); the blocks
    are ``_last_steps``."""
    if lengths is None:
        return None, None, _last_steps(None, T, B)
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.shape[0] != B or lengths.dtype.is_floating_point:
        raise ValueError(f"lengths must be an integer tensor of shape ({B},) (one true length per "
                         f"example), received {lengths.dtype} of shape {tuple(lengths.shape)}. "
                         f"Pass e.g. torch.tensor([len(s) for s in batch]).")
    lengths = lengths.to("cpu", torch.int64)
    if B and (int(lengths.min()) < 0 or int(lengths.max()) > T):
        raise ValueError(f"lengths must lie in [0, T={T}], received min {int(lengths.min())}, "
                         f"max {int(lengths.max())}. Clip them to the padded length T.")
    sorted_len, order = torch.sort(lengths, descending=True, stable=True)
    if torch.equal(order, torch.arange(B)):
        order = None
    lens = sorted_len.tolist()
    batch_sizes = [sum(1 for n in lens if n > t) for t in range(T)]
    if all(bs == B for bs in batch_sizes):  # every example runs all T steps
        return None, None, _last_steps(None, T, B)
    return order, batch_sizes, _last_steps(lens, T, B)


def _with_order(fn, order, xg, states, rest, T):
    """Run ``fn`` on the batch sorted by decreasing length and put the results back in order."""
    if order is None:
        return fn(xg, *states, *rest)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())
    order_d, inverse_d = order.to(xg.device), inverse.to(xg.device)
    outs = fn(xg.index_select(1, order_d), *(s.index_select(0, order_d) for s in states), *rest)
    out, *finals = outs
    return (out.index_select(1, inverse_d), *(f.index_select(0, inverse_d) for f in finals))


def _last_steps(lens, T: int, B: int) -> dict[int, tuple[int, int]]:
    """{t: (lo, hi)}: the examples lo:hi (sorted by decreasing length) take their last step at t,
    so h_n/c_n come from step t and their gradients enter the backward there; t = -1 for
    examples of length 0 (h_n = h0)."""
    if lens is None:
        return {T - 1: (0, B)}
    blocks = {}
    for t in range(-1, T):
        lo = sum(1 for n in lens if n > t + 1)
        hi = sum(1 for n in lens if n > t)
        if hi > lo:
            blocks[t] = (lo, hi)
    return blocks


def _final_state(seq: torch.Tensor, init: torch.Tensor, blocks) -> torch.Tensor:
    """State of each example after its last step: seq[t, lo:hi] for each block (init for t=-1).

    seq: (T, B, H) states after each step."""
    if len(blocks) == 1 and (seq.shape[0] - 1) in blocks:
        return seq[-1].clone()
    final = init.clone()
    for t, (lo, hi) in blocks.items():
        if t >= 0:
            final[lo:hi] = seq[t, lo:hi]
    return final


def _check_shapes(who: str, xg, states, w_hh, gates: int, vectors: dict) -> tuple[int, int, int]:
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
    if len({t.dtype for t in tensors}) != 1 or len({t.device for t in tensors}) != 1:
        raise ValueError(f"{who} expected all tensors on one device with one dtype, received "
                         f"{sorted({(str(t.device), str(t.dtype)) for t in tensors})}. Move them "
                         f"with .to(xg).")
    return T, B, H


# ---------------------------------------------------------------------------------------------
# Workspace: sequence buffers reused across calls
# ---------------------------------------------------------------------------------------------

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
        import threading
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


def _input_ln(who: str, xg, gain_x, bias_x, groups: tuple[int, ...], eps: float):
    """The optional input LN of ``ln_*_sequence`` (each group of units of xg normalized on its
    own). Returns (xg, gain_x, bias_x): unchanged when the C kernel applies the LN itself,
    else xg normalized here (ordinary autograd) and (None, None)."""
    if (gain_x is None) != (bias_x is None):
        raise ValueError(f"{who} expected gain_x and bias_x together (the input LN's gain and "
                         f"bias) or neither, received only one. Pass both, or None.")
    if gain_x is None or _native_lib(xg) is not None:
        return xg, gain_x, bias_x
    parts = zip(xg.split(groups, -1), gain_x.split(groups), bias_x.split(groups))
    xg = torch.cat([torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps)
                    for x, g, b in parts], -1)
    return xg, None, None


def _buffer(*shape, like: torch.Tensor, zero: bool = True) -> torch.Tensor:
    """A buffer for a whole sequence: zero-filled where rows past an example's length must read as
    0 (or where the torch-ops steps write into it: they then write to pages already faulted in by
    one fast memset instead of faulting them in one step at a time; measured 2-3x slower steps);
    ``zero=False`` for buffers the C kernels write completely (a 13 MB fill is ~1 ms)."""
    return like.new_zeros(shape) if zero else like.new_empty(shape)


# ---------------------------------------------------------------------------------------------
# LN-LSTM
# ---------------------------------------------------------------------------------------------

def _lstm_scale(H: int, like: torch.Tensor) -> torch.Tensor:
    """m = [1, 1, 2, 1] per gate block: sigmoid(m * pre) gives i, f, o and (tanh(u) + 1) / 2."""
    m = like.new_ones(4, H)
    m[2] = 2
    return m.reshape(4 * H)


def _steps(x: torch.Tensor, batch_sizes, T: int, shift: int = 0) -> list[torch.Tensor]:
    """x[t + shift] for t < T, restricted to the ``batch_sizes[t]`` running examples: views made
    once per call, so the time loops do no slicing."""
    views = x.unbind(0)
    if batch_sizes is None:
        return list(views[shift:shift + T])
    return [views[t + shift][:bs] for t, bs in enumerate(batch_sizes)]


def _prefixes(x: torch.Tensor, batch_sizes, T: int) -> list[torch.Tensor]:
    """x[:batch_sizes[t]] for each step t: the running rows of a (B, ...) buffer."""
    return [x] * T if batch_sizes is None else [x[:bs] for bs in batch_sizes]


def _scratch(save: bool, T: int, B: int, width: int, like: torch.Tensor):
    """(T, B, width) buffer kept for the backward, or one (B, width) buffer seen at every step."""
    if save:
        return _buffer(T, B, width, like=like)
    return like.new_empty(1, B, width).expand(T, B, width)


def _n_steps(batch_sizes, T: int) -> int:
    """Steps with at least one running example (the loops stop there)."""
    return T if batch_sizes is None else sum(1 for bs in batch_sizes if bs > 0)


def _lstm_forward(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, batch_sizes, blocks, eps,
                  save: bool):
    """The forward loop. Returns (out, h_n, c_n, saved) where saved holds the buffers the backward
    needs (None when ``save`` is False)."""
    T, B, G = xg.shape
    H = G // 4
    m = _lstm_scale(H, xg)
    gain_h2, bias_h2 = gain_h * m, bias_h * m  # LN output pre-scaled for the sigmoid-tanh trick
    gain_c2, bias_c2 = gain_c * 2, bias_c * 2  # tanh(LN(c)) = 2 sigmoid(2 LN(c)) - 1
    linear = _Linear(w_hh, B)

    hs = _buffer(T + 1, B, H, like=xg)  # hs[0] = h0, hs[t + 1] = h_t
    hs[0] = h0
    cs = _buffer(T + 1, B, H, like=xg)  # raw cell states, cs[0] = c0
    cs[0] = c0
    hg_all = _buffer(T, B, G, like=xg) if save else None  # W_h h, the LN input
    act_all = _scratch(save, T, B, G, xg)  # sigmoid(m * gates): i, f, (tanh(u)+1)/2, o
    tc_all = _scratch(save, T, B, H, xg)   # tanh(LN(c_t))
    stats_h, stats_c = [], []

    steps = lambda x, shift=0: _steps(x, batch_sizes, T, shift)  # noqa: E731
    h_prev, h_new, c_prev, c_new = steps(hs), steps(hs, 1), steps(cs), steps(cs, 1)
    xgs, acts, tcs = steps(xg), steps(act_all), steps(tc_all)
    hgs = steps(hg_all) if save else [None] * T
    ingate, forgetgate, cellgate, outgate = (steps(a) for a in act_all.split(H, -1))
    for t in range(_n_steps(batch_sizes, T)):
        # gates = LN(W_h h_{t-1}; g1, b1) + xg_t                                      (B, 4H)
        hg = linear(h_prev[t], out=hgs[t])
        pre, mean_h, rstd_h = _layer_norm(hg, (G,), gain_h2, bias_h2, eps)
        pre.addcmul_(xgs[t], m)
        torch.sigmoid(pre, out=acts[t])          # cellgate = (tanh(u) + 1) / 2
        # c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u),  tanh(u) = 2 cellgate - 1       (B, H)
        c = torch.mul(forgetgate[t], c_prev[t], out=c_new[t])
        c.addcmul_(ingate[t], cellgate[t], value=2).sub_(ingate[t])
        # h_t = sigmoid(o) tanh(LN(c_t; g3, b3))                                          (B, H)
        cn2, mean_c, rstd_c = _layer_norm(c, (H,), gain_c2, bias_c2, eps)
        torch.sigmoid(cn2, out=tcs[t]).mul_(2).sub_(1)
        torch.mul(outgate[t], tcs[t], out=h_new[t])
        if save:
            stats_h.append((mean_h, rstd_h))
            stats_c.append((mean_c, rstd_c))

    out = hs[1:]
    h_n = _final_state(out, h0, blocks)
    c_n = _final_state(cs[1:], c0, blocks)
    saved = (hs, cs, hg_all, act_all, tc_all, stats_h, stats_c) if save else None
    return out, h_n, c_n, saved


# ---- the whole loop in one C call (``_rnn_steps.c``), float32 on the CPU -------------------------

# Set to False to force the torch-ops path (tests run both).
USE_NATIVE = True


def _native_lib(xg: torch.Tensor):
    """The C kernels when they apply (float32 CPU tensors) and build here, else None."""
    if not USE_NATIVE or xg.device.type != "cpu" or xg.dtype != torch.float32:
        return None
    from . import _native
    return _native.load()


def _native_threads(B: int) -> int:
    """Threads for the whole-sequence C kernel: torch's count, at least 4 examples each."""
    return max(1, min(torch.get_num_threads(), B // 4))


def _ptr(x: torch.Tensor | None):
    return None if x is None else x.data_ptr()


def _c_forward(who: str, lib, kernel: str, xw, states, w_hh, vectors, gain_x, bias_x,
               batch_sizes, eps, saved):
    """Run a whole-sequence C forward (``lstm_forward_seq`` / ``gru_forward_seq``): its own
    recurrent GEMM (weights packed in panels), all LNs, gates and outputs of every step. With
    ``gain_x``, xw is the raw W_x x and the input LN is applied in the kernel; else xw is the
    input term itself. ``saved``: the buffers the kernel fills for the backward, or None.
    Returns (hs, final states): hs (T + 1, B, H) = [h0, h_1, ...] (0 past a row's length)."""
    T, B, _ = xw.shape
    H = states[0].shape[-1]
    wp = _panels(w_hh, lib.panel_width())
    vectors = [p.detach().contiguous() for p in vectors]
    xs = [None, None] if gain_x is None else [p.detach().contiguous() for p in (gain_x, bias_x)]
    # the kernel writes every other element of hs; the saved buffers are read only where written
    hs = _buffer(T + 1, B, H, like=xw, zero=batch_sizes is not None)
    hs[0] = states[0]
    finals = [s.detach().clone(memory_format=torch.contiguous_format) for s in states]
    sizes = None if batch_sizes is None else torch.tensor(batch_sizes, dtype=torch.int32)
    status = getattr(lib, kernel)(
        T, B, H, eps, _native_threads(B), _ptr(sizes), xw.data_ptr(), *map(_ptr, xs),
        wp.data_ptr(), *(v.data_ptr() for v in vectors), hs.data_ptr(),
        *(f.data_ptr() for f in finals), *(_ptr(x) for x in (saved or [None] * 5)))
    if status != 0:
        raise MemoryError(f"{who}: the C kernel could not allocate its per-thread workspace "
                          f"(status {status}).")
    return hs, finals


def _c_backward(who: str, lib, kernel: str, ctx, w_hh, xw, gain_x, hs, buffers, gains, grad_out,
                grad_finals, n_params: int):
    """Run a whole-sequence C backward (``lstm_backward_seq`` / ``gru_backward_seq``) over
    ``buffers``, what its forward saved (hs: the states [h0, h_1, ...]), then dW_hh as ONE GEMM
    over all steps. Returns (grad of the input term (of xw with gain_x), grads of the initial
    states, dW_hh, the LN parameters' grads as one float64 vector of n_params)."""
    T, B, G = xw.shape
    H = hs.shape[-1]
    padded = ctx.batch_sizes is not None
    dxg = _buffer(T, B, G, like=hs, zero=padded)  # grad of xw (or of the input term)
    dhg = _WORKSPACE.get((T, B, G), like=hs)       # grad of W_hh h_{t-1}
    if padded:
        dhg.zero_()
    finals = [g.detach().clone(memory_format=torch.contiguous_format) for g in grad_finals]
    dparams = torch.zeros(n_params, dtype=torch.float64)
    sizes = None if ctx.batch_sizes is None else torch.tensor(ctx.batch_sizes, dtype=torch.int32)
    grad_out = grad_out.contiguous()  # kept alive (by this name) during the call
    gains = [g.detach().contiguous() for g in gains]
    gx = None if gain_x is None else gain_x.detach().contiguous()
    wtp = _panels(w_hh.t(), lib.panel_width())  # dh_{t-1} = d(W_hh h_{t-1}) @ W_hh
    status = getattr(lib, kernel)(
        T, B, H, _native_threads(B), _ptr(sizes), wtp.data_ptr(), grad_out.data_ptr(),
        xw.data_ptr(), _ptr(gx), *(b.data_ptr() for b in buffers),
        *(g.data_ptr() for g in gains), *(f.data_ptr() for f in finals), dxg.data_ptr(),
        dhg.data_ptr(), dparams.data_ptr())
    if status != 0:
        raise MemoryError(f"{who}: the C backward kernel could not allocate its per-thread "
                          f"workspace (status {status}).")
    dw_hh = torch.mm(dhg.reshape(T * B, G).t(), hs[:-1].reshape(T * B, H))
    return dxg, finals, dw_hh, dparams


def _lstm_forward_native(lib, xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x,
                         batch_sizes, eps, save: bool):
    """The LN-LSTM forward in ONE C call. Returns (out, h_n, c_n, saved); saved (``save``): hs,
    cs, hg_all, act_all, tc_all, stats (6, T, B) = mean / rstd of W_h h, of c, of xw."""
    T, B, G = xw.shape
    H = G // 4
    saved = None
    if save:
        cs = _WORKSPACE.get((T + 1, B, H), like=xw)
        cs[0] = c0
        saved = [cs, *(_WORKSPACE.get(shape, like=xw)
                       for shape in ((T, B, G), (T, B, G), (T, B, H), (6, T, B)))]
    hs, (h_n, c_n) = _c_forward("ln_lstm_sequence", lib, "lstm_forward_seq", xw, (h0, c0), w_hh,
                                (gain_h, bias_h, gain_c, bias_c), gain_x, bias_x, batch_sizes,
                                eps, saved)
    return hs[1:], h_n, c_n, (hs, *saved) if save else None


def _lstm_backward_native(lib, ctx, grad_out, grad_hn, grad_cn):
    w_hh, gain_h, gain_c, xw, gain_x, hs, *buffers = ctx.saved_tensors  # buffers: cs, ...
    H = gain_c.shape[0]
    dxw, (dh, dc), dw_hh, dparams = _c_backward(
        "ln_lstm_sequence", lib, "lstm_backward_seq", ctx, w_hh, xw, gain_x, hs, buffers,
        (gain_h, gain_c), grad_out, (grad_hn, grad_cn), 18 * H)
    G = 4 * H
    dgain_h, dbias_h, dgain_c, dbias_c, dgain_x, dbias_x = (
        p.to(xw.dtype) for p in dparams.split([G, G, H, H, G, G]))
    if not ctx.input_ln:
        dgain_x = dbias_x = None
    return (dxw, dh, dc, dw_hh, dgain_h, dbias_h, dgain_c, dbias_c, dgain_x, dbias_x, None, None,
            None)


def _stack_stats(stats, T: int, B: int, padded: bool):
    """Per-step (mean, rstd) of shape (bs, 1) -> two (T, B, 1) tensors (0 for padded rows), in
    the statistics' dtype (float32 for half inputs)."""
    if not padded:
        return torch.stack([mu for mu, _ in stats]), torch.stack([rs for _, rs in stats])
    like = stats[0][0] if stats else torch.empty(0)
    mean = like.new_zeros(T, B, 1)
    rstd = like.new_zeros(T, B, 1)
    for t, (mu, rs) in enumerate(stats):
        mean[t, :mu.shape[0]] = mu
        rstd[t, :rs.shape[0]] = rs
    return mean, rstd


class _LNLSTMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x,
                batch_sizes, blocks, eps):
        ctx.batch_sizes, ctx.blocks, ctx.eps = batch_sizes, blocks, eps
        ctx.lib = _native_lib(xg)
        ctx.input_ln = gain_x is not None
        if ctx.lib is not None:
            out, h_n, c_n, saved = _lstm_forward_native(ctx.lib, xg, h0, c0, w_hh, gain_h,
                                                        bias_h, gain_c, bias_c, gain_x, bias_x,
                                                        batch_sizes, eps, save=True)
            ctx.save_for_backward(w_hh, gain_h, gain_c, xg, gain_x, *saved)
            return out, h_n, c_n
        if ctx.input_ln:  # callers run the input LN outside for the torch-ops path
            raise RuntimeError("internal: the input LN is folded only into the C kernel")
        out, h_n, c_n, saved = _lstm_forward(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c,
                                             batch_sizes, blocks, eps, save=True)
        hs, cs, hg_all, act_all, tc_all, stats_h, stats_c = saved
        ctx.save_for_backward(w_hh, gain_h, gain_c, hs, cs, hg_all, act_all, tc_all)
        ctx.stats = (stats_h, stats_c)
        return out, h_n, c_n

    @staticmethod
    @once_differentiable  # the hand-written backward is not itself differentiable
    def backward(ctx, grad_out, grad_hn, grad_cn):
        if ctx.lib is not None:
            return _lstm_backward_native(ctx.lib, ctx, grad_out, grad_hn, grad_cn)
        w_hh, gain_h, gain_c, hs, cs, hg_all, act_all, tc_all = ctx.saved_tensors
        stats_h, stats_c = ctx.stats
        batch_sizes, blocks, eps = ctx.batch_sizes, ctx.blocks, ctx.eps
        T, B, G = hg_all.shape
        H = G // 4
        padded = batch_sizes is not None
        # d pre = d act * s (1 - s) * [1, 1, 4, 1]: the cell block is tanh(u) = 2 s(2u) - 1.
        # The input-gate block carries -1: it is computed as -(d c * tanh(u)) below.
        scale = _lstm_scale(H, hg_all).square()
        scale[:H] = -1
        linear_t = _Linear(w_hh.t(), B)  # dh_{t-1} = d(W_h h_{t-1}) @ W_h

        dxg = _buffer(T, B, G, like=hg_all)    # d pre: grad of xg and of LN_h
        dhg = _buffer(T, B, G, like=hg_all)    # grad of W_h h_{t-1}
        dcn = _buffer(T, B, H, like=hg_all)    # grad of LN(c_t)
        dh = grad_hn.new_zeros(B, H)
        dc = grad_cn.new_zeros(B, H)
        deriv = hg_all.new_empty(B, G)
        dtc = hg_all.new_empty(B, H)

        steps = lambda x, shift=0: _steps(x, batch_sizes, T, shift)  # noqa: E731
        rows = lambda x: _prefixes(x, batch_sizes, T)  # noqa: E731
        acts, tcs, c_new, c_prev = steps(act_all), steps(tc_all), steps(cs, 1), steps(cs)
        ingate, forgetgate, cellgate, outgate = (steps(a) for a in act_all.split(H, -1))
        d_pres, d_cns, d_hgs, hgs = steps(dxg), steps(dcn), steps(dhg), steps(hg_all)
        d_i, d_f, d_u, d_o = (steps(d) for d in dxg.split(H, -1))
        grad_outs = steps(grad_out)
        dhs, dcs, derivs, dtcs = rows(dh), rows(dc), rows(deriv), rows(dtc)
        for t in range(_n_steps(batch_sizes, T) - 1, -1, -1):
            if t in blocks:  # these examples' last step: grads of h_n, c_n enter here
                lo, hi = blocks[t]
                dh[lo:hi] += grad_hn[lo:hi]
                dc[lo:hi] += grad_cn[lo:hi]
            dh_t = dhs[t].add_(grad_outs[t])
            tc = tcs[t]
            # h = o * tc
            torch.mul(dh_t, tc, out=d_o[t])
            d_tc = torch.mul(dh_t, outgate[t], out=dtcs[t])
            # tc = tanh(LN(c)):  d LN(c) = d tc (1 - tc^2)
            d_cn = torch.mul(d_tc, tc, out=d_cns[t])
            torch.addcmul(d_tc, d_cn, tc, value=-1, out=d_cn)
            mean_c, rstd_c = stats_c[t]
            dc_t = _layer_norm_backward(d_cn, c_new[t], (H,), mean_c, rstd_c, gain_c, None,
                                        [True, False, False])[0]
            dc_t.add_(dcs[t])
            # c = f c_prev + i tanh(u),  tanh(u) = 2 cellgate - 1
            torch.addcmul(dc_t, dc_t, cellgate[t], value=-2, out=d_i[t])  # = -(dc * tanh(u))
            torch.mul(dc_t, c_prev[t], out=d_f[t])
            torch.mul(dc_t, ingate[t], out=d_u[t])
            torch.mul(dc_t, forgetgate[t], out=dcs[t])
            # through the sigmoids: d pre = d act * s (1 - s) * scale
            act = acts[t]
            torch.addcmul(act, act, act, value=-1, out=derivs[t])
            d_pre = d_pres[t].mul_(derivs[t]).mul_(scale)
            # gates = LN(W_h h_{t-1}) + xg:  d (W_h h_{t-1}) through the LN
            mean_h, rstd_h = stats_h[t]
            d_hg = d_hgs[t].copy_(_layer_norm_backward(d_pre, hgs[t], (G,), mean_h, rstd_h,
                                                       gain_h, None, [True, False, False])[0])
            linear_t(d_hg, out=dhs[t])
        if -1 in blocks:  # length-0 examples: h_n = h0, c_n = c0
            lo, hi = blocks[-1]
            dh[lo:hi] += grad_hn[lo:hi]
            dc[lo:hi] += grad_cn[lo:hi]

        # everything that does not feed the recurrence: one GEMM / one reduction over all steps
        dw_hh = torch.mm(dhg.reshape(T * B, G).t(), hs[:-1].reshape(T * B, H))
        mean_h, rstd_h = _stack_stats(stats_h, T, B, padded)
        mean_c, rstd_c = _stack_stats(stats_c, T, B, padded)
        _, dgain_h, dbias_h = _layer_norm_backward(dxg, hg_all, (G,), mean_h, rstd_h, gain_h,
                                                   gain_h, [False, True, True])
        _, dgain_c, dbias_c = _layer_norm_backward(dcn, cs[1:], (H,), mean_c, rstd_c, gain_c,
                                                   gain_c, [False, True, True])
        return (dxg, dh, dc, dw_hh, dgain_h, dbias_h, dgain_c, dbias_c, None, None, None, None,
                None)


def ln_lstm_sequence(xg: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, w_hh: torch.Tensor,
                     gain_h: torch.Tensor, bias_h: torch.Tensor, gain_c: torch.Tensor,
                     bias_c: torch.Tensor, lengths: torch.Tensor | None = None,
                     eps: float = 1e-5, gain_x: torch.Tensor | None = None,
                     bias_x: torch.Tensor | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer, one direction of the LN-LSTM (PAPER.md section 2) over a whole sequence::

        gates = LN(W_h h_{t-1}; gain_h, bias_h) + xg_t          LN over all 4H gates jointly
        i, f, u, o = split(gates)                                 torch.nn.LSTM's gate order
        c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(u)
        h_t = sigmoid(o) tanh(LN(c_t; gain_c, bias_c))            raw c_t carried to step t+1

    Args:
        xg: (T, B, 4H) input term ``LN(W_x x_t; g2, b2) + b`` for all steps; or, with
            ``gain_x``/``bias_x`` (4H,), the raw ``W_x x_t``, normalized here (in the C kernel's
            step, which saves a pass over (T, B, 4H)): xg_t := LN(xg_t; gain_x, bias_x).
        h0, c0: (B, H) initial states. w_hh: (4H, H). gain_h, bias_h: (4H,). gain_c, bias_c: (H,).
        lengths: None or (B,) integer tensor of true lengths, in any order. Steps t >= lengths[b]
            copy the state forward and give out[t, b] = 0.
    Returns:
        out (T, B, H), h_n (B, H), c_n (B, H): the last two at each example's true length.
    Differentiable in every tensor argument; the backward is hand-derived (see module doc).
    """
    H = h0.shape[-1]
    vectors = {"gain_h": (gain_h, 4 * H), "bias_h": (bias_h, 4 * H), "gain_c": (gain_c, H),
               "bias_c": (bias_c, H)}
    if gain_x is not None and bias_x is not None:
        vectors.update(gain_x=(gain_x, 4 * H), bias_x=(bias_x, 4 * H))
    T, B, H = _check_shapes("ln_lstm_sequence", xg, {"h0": h0, "c0": c0}, w_hh, 4, vectors)
    if _kernels.applies_rnn(xg):  # CUDA: the Triton step kernels (layernorm.kernels)
        return _kernels.ln_lstm_sequence(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c,
                                         lengths, eps, gain_x, bias_x)
    xg, gain_x, bias_x = _input_ln("ln_lstm_sequence", xg, gain_x, bias_x, (4 * H,), eps)
    order, batch_sizes, blocks = _prepare_lengths(lengths, T, B)
    params = (w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (xg, h0, c0, *params))

    def run(xg_, h0_, c0_, *rest):
        if needs_grad:
            return _LNLSTMFunction.apply(xg_, h0_, c0_, *rest, batch_sizes, blocks, eps)
        with torch.no_grad():
            lib = _native_lib(xg_)
            if lib is not None:
                return _lstm_forward_native(lib, xg_, h0_, c0_, *rest, batch_sizes, eps,
                                            save=False)[:3]
            return _lstm_forward(xg_, h0_, c0_, *rest[:5], batch_sizes, blocks, eps,
                                 save=False)[:3]

    return _with_order(run, order, xg.contiguous(), (h0, c0), params, T)


# ---------------------------------------------------------------------------------------------
# LN-GRU
# ---------------------------------------------------------------------------------------------

def _gru_forward(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, batch_sizes, blocks, eps,
                 save: bool):
    T, B, G = xg.shape
    H = G // 3
    gain_u2, bias_u2 = gain_u * 2, bias_u * 2  # LN(U h) pre-scaled: tanh(a) = 2 sigmoid(2a) - 1
    linear = _Linear(w_hh, B)

    hs = _buffer(T + 1, B, H, like=xg)  # hs[0] = h0, hs[t + 1] = h_t
    hs[0] = h0
    # the LN inputs W_h h (T, B, 2H) and U h (T, B, H), kept contiguous for the LN kernels
    hg_rz = _scratch(save, T, B, 2 * H, xg)
    hg_u = _scratch(save, T, B, H, xg)
    rz_all = _scratch(save, T, B, 2 * H, xg)  # sigmoid gates r, z
    un_all = _scratch(save, T, B, H, xg)      # 2 LN(U h_{t-1}; g4, b4)
    n_all = _scratch(save, T, B, H, xg)       # h~ = tanh(...)
    stats_h, stats_u = [], []

    steps = lambda x, shift=0: _steps(x, batch_sizes, T, shift)  # noqa: E731
    h_prev, h_new = steps(hs), steps(hs, 1)
    x_rz, x_n = steps(xg[..., :2 * H]), steps(xg[..., 2 * H:])
    hg_rzs, hg_us, rzs, uns, ns = (steps(a) for a in (hg_rz, hg_u, rz_all, un_all, n_all))
    resetgate, updategate = (steps(a) for a in rz_all.split(H, -1))
    for t in range(_n_steps(batch_sizes, T)):
        hg = linear(h_prev[t])                                    # [W_h h; U h]  (B, 3H)
        hg_rzs[t].copy_(hg[:, :2 * H])
        hg_us[t].copy_(hg[:, 2 * H:])
        # r, z = sigmoid(LN(W_h h; g1, b1) + LN(W_x x; g2, b2))      LN over 2H jointly
        a, mean_h, rstd_h = _layer_norm(hg_rzs[t], (2 * H,), gain_h, bias_h, eps)
        torch.sigmoid(a.add_(x_rz[t]), out=rzs[t])
        # h~ = tanh(LN(W x; g3, b3) + r * LN(U h; g4, b4))           computed as 2 sigmoid(2 .) - 1
        un2, mean_u, rstd_u = _layer_norm(hg_us[t], (H,), gain_u2, bias_u2, eps)
        pre = torch.addcmul(x_n[t], resetgate[t], un2, value=0.5).mul_(2)
        torch.sigmoid(pre, out=ns[t]).mul_(2).sub_(1)
        # h_t = (1 - z) h~ + z h_{t-1}                               torch.nn.GRU's convention
        torch.lerp(ns[t], h_prev[t], updategate[t], out=h_new[t])
        if save:
            uns[t].copy_(un2)
            stats_h.append((mean_h, rstd_h))
            stats_u.append((mean_u, rstd_u))

    out = hs[1:]  # rows of finished examples were never written: 0
    h_n = _final_state(out, h0, blocks)
    saved = (hs, hg_rz, hg_u, rz_all, un_all, n_all, stats_h, stats_u) if save else None
    return out, h_n, saved


def _gru_forward_native(lib, xw, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x,
                        batch_sizes, eps, save: bool):
    """The LN-GRU forward in ONE C call (the input LN, with gain_x (3H), over [:2H] and [2H:]).
    Returns (out, h_n, saved); saved (``save``): hs, hg_all, rz_all, un_all, n_all, stats
    (8, T, B)."""
    T, B, G = xw.shape
    H = G // 3
    saved = [_WORKSPACE.get(shape, like=xw) for shape in (
        (T, B, G), (T, B, 2 * H), (T, B, H), (T, B, H), (8, T, B))] if save else None
    hs, (h_n,) = _c_forward("ln_gru_sequence", lib, "gru_forward_seq", xw, (h0,), w_hh,
                            (gain_h, bias_h, gain_u, bias_u), gain_x, bias_x, batch_sizes, eps,
                            saved)
    return hs[1:], h_n, (hs, *saved) if save else None


def _gru_backward_native(lib, ctx, grad_out, grad_hn):
    w_hh, gain_h, gain_u, xw, gain_x, hs, *rest = ctx.saved_tensors
    H = gain_u.shape[0]
    dxw, (dh,), dw_hh, dparams = _c_backward(
        "ln_gru_sequence", lib, "gru_backward_seq", ctx, w_hh, xw, gain_x, hs, (hs, *rest),
        (gain_h, gain_u), grad_out, (grad_hn,), 12 * H)
    dgain_h, dbias_h, dgain_u, dbias_u, dgain_x, dbias_x = (
        p.to(xw.dtype) for p in dparams.split([2 * H, 2 * H, H, H, 3 * H, 3 * H]))
    if not ctx.input_ln:
        dgain_x = dbias_x = None
    return dxw, dh, dw_hh, dgain_h, dbias_h, dgain_u, dbias_u, dgain_x, dbias_x, None, None, None


class _LNGRUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x, batch_sizes,
                blocks, eps):
        ctx.batch_sizes, ctx.blocks, ctx.eps = batch_sizes, blocks, eps
        ctx.lib = _native_lib(xg)
        ctx.input_ln = gain_x is not None
        if ctx.lib is not None:
            out, h_n, saved = _gru_forward_native(ctx.lib, xg, h0, w_hh, gain_h, bias_h, gain_u,
                                                  bias_u, gain_x, bias_x, batch_sizes, eps,
                                                  save=True)
            ctx.save_for_backward(w_hh, gain_h, gain_u, xg, gain_x, *saved)
            return out, h_n
        if ctx.input_ln:  # callers run the input LN outside for the torch-ops path
            raise RuntimeError("internal: the input LN is folded only into the C kernel")
        out, h_n, saved = _gru_forward(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, batch_sizes,
                                       blocks, eps, save=True)
        hs, hg_rz, hg_u, rz_all, un_all, n_all, stats_h, stats_u = saved
        ctx.save_for_backward(w_hh, gain_h, gain_u, hs, hg_rz, hg_u, rz_all, un_all, n_all)
        ctx.stats = (stats_h, stats_u)
        return out, h_n

    @staticmethod
    @once_differentiable  # the hand-written backward is not itself differentiable
    def backward(ctx, grad_out, grad_hn):
        if ctx.lib is not None:
            return _gru_backward_native(ctx.lib, ctx, grad_out, grad_hn)
        w_hh, gain_h, gain_u, hs, hg_rz, hg_u, rz_all, un_all, n_all = ctx.saved_tensors
        stats_h, stats_u = ctx.stats
        batch_sizes, blocks, eps = ctx.batch_sizes, ctx.blocks, ctx.eps
        T, B, H = hg_u.shape
        G = 3 * H
        padded = batch_sizes is not None
        linear_t = _Linear(w_hh.t(), B)

        dxg = _buffer(T, B, G, like=hg_u)   # grad of xg: [d(r, z) pre; d n pre]
        dhg = _buffer(T, B, G, like=hg_u)   # grad of [W_h h; U h]
        dun = _buffer(T, B, H, like=hg_u)   # grad of LN(U h)
        dh = grad_hn.new_zeros(B, H)
        dn = hg_u.new_empty(B, H)
        deriv = hg_u.new_empty(B, 2 * H)

        steps = lambda x, shift=0: _steps(x, batch_sizes, T, shift)  # noqa: E731
        rows = lambda x: _prefixes(x, batch_sizes, T)  # noqa: E731
        rzs, ns, uns, h_prev = steps(rz_all), steps(n_all), steps(un_all), steps(hs)
        resetgate, updategate = (steps(a) for a in rz_all.split(H, -1))
        hg_rzs, hg_us, d_uns, grad_outs = steps(hg_rz), steps(hg_u), steps(dun), steps(grad_out)
        d_rz, d_r, d_z, d_npre = (steps(d) for d in (dxg[..., :2 * H], dxg[..., :H],
                                                     dxg[..., H:2 * H], dxg[..., 2 * H:]))
        d_hrz, d_hu = steps(dhg[..., :2 * H]), steps(dhg[..., 2 * H:])
        d_hgs = steps(dhg)
        dhs, dns, derivs = rows(dh), rows(dn), rows(deriv)
        for t in range(_n_steps(batch_sizes, T) - 1, -1, -1):
            if t in blocks:
                lo, hi = blocks[t]
                dh[lo:hi] += grad_hn[lo:hi]
            dh_t = dhs[t].add_(grad_outs[t])
            n = ns[t]
            # h = n + z (h_prev - n)
            d_n = torch.mul(dh_t, updategate[t], out=dns[t])     # direct path: dh z
            torch.sub(h_prev[t], n, out=d_z[t]).mul_(dh_t)
            torch.sub(dh_t, d_n, out=d_n)                        # dn = dh (1 - z)
            dh_t.sub_(d_n)
            # n = tanh(npre):  d npre = dn (1 - n^2)
            torch.mul(d_n, n, out=d_npre[t])
            torch.addcmul(d_n, d_npre[t], n, value=-1, out=d_npre[t])
            # npre = xn + r * un   (uns holds 2 un)
            torch.mul(d_npre[t], uns[t], out=d_r[t]).mul_(0.5)
            torch.mul(d_npre[t], resetgate[t], out=d_uns[t])
            # r, z = sigmoid(.)
            rz = rzs[t]
            torch.addcmul(rz, rz, rz, value=-1, out=derivs[t])
            d_rz[t].mul_(derivs[t])
            mean_h, rstd_h = stats_h[t]
            mean_u, rstd_u = stats_u[t]
            d_hrz[t].copy_(_layer_norm_backward(d_rz[t], hg_rzs[t], (2 * H,), mean_h, rstd_h,
                                                gain_h, None, [True, False, False])[0])
            d_hu[t].copy_(_layer_norm_backward(d_uns[t], hg_us[t], (H,), mean_u, rstd_u, gain_u,
                                               None, [True, False, False])[0])
            dh_t.add_(linear_t(d_hgs[t]))
        if -1 in blocks:  # length-0 examples: h_n = h0
            lo, hi = blocks[-1]
            dh[lo:hi] += grad_hn[lo:hi]

        dw_hh = torch.mm(dhg.reshape(T * B, G).t(), hs[:-1].reshape(T * B, H))
        mean_h, rstd_h = _stack_stats(stats_h, T, B, padded)
        mean_u, rstd_u = _stack_stats(stats_u, T, B, padded)
        _, dgain_h, dbias_h = _layer_norm_backward(dxg[..., :2 * H].contiguous(), hg_rz,
                                                   (2 * H,), mean_h, rstd_h, gain_h, gain_h,
                                                   [False, True, True])
        _, dgain_u, dbias_u = _layer_norm_backward(dun, hg_u, (H,), mean_u, rstd_u, gain_u,
                                                   gain_u, [False, True, True])
        return dxg, dh, dw_hh, dgain_h, dbias_h, dgain_u, dbias_u, None, None, None, None, None


def ln_gru_sequence(xg: torch.Tensor, h0: torch.Tensor, w_hh: torch.Tensor, gain_h: torch.Tensor,
                    bias_h: torch.Tensor, gain_u: torch.Tensor, bias_u: torch.Tensor,
                    lengths: torch.Tensor | None = None, eps: float = 1e-5,
                    gain_x: torch.Tensor | None = None, bias_x: torch.Tensor | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer, one direction of the LN-GRU (PAPER.md section 2) over a whole sequence::

        r, z = split(sigmoid(LN(W_h h_{t-1}; gain_h, bias_h) + xg_t[:2H]))   LN over 2H jointly
        h~   = tanh(xg_t[2H:] + r * LN(U h_{t-1}; gain_u, bias_u))           U h normalized before r
        h_t  = (1 - z) h~ + z h_{t-1}                                        torch.nn.GRU's z

    Gate order r, z, n and the update convention of torch.nn.GRU (so torch's weights load
    unchanged, as in ``layernorm.GRU``); the paper writes h_t = (1 - z) h_{t-1} + z h~, i.e. its z
    is 1 - this z (the same family: negate the z half of the gate pre-activation).

    Args:
        xg: (T, B, 3H) input terms for all steps: ``[LN(W_x x_t; g2, b2) (2H, for r, z);
            LN(W x_t; g3, b3) (H, for h~)]`` plus any biases, computed outside with autograd;
            or, with ``gain_x``/``bias_x`` (3H,), the raw ``[W_x x_t; W x_t]``, normalized here
            (the two groups separately; in the C kernel's step on the CPU).
        h0: (B, H). w_hh: (3H, H) = [W_h (2H rows: r, z); U (H rows)].
        gain_h, bias_h: (2H,) the LN of W_h h. gain_u, bias_u: (H,) the LN of U h.
        lengths: None or (B,) integer tensor, any order; steps t >= lengths[b] copy the state
            forward and give out[t, b] = 0.
    Returns:
        out (T, B, H), h_n (B, H) (at each example's true length).
    """
    H = h0.shape[-1]
    vectors = {"gain_h": (gain_h, 2 * H), "bias_h": (bias_h, 2 * H), "gain_u": (gain_u, H),
               "bias_u": (bias_u, H)}
    if gain_x is not None and bias_x is not None:
        vectors.update(gain_x=(gain_x, 3 * H), bias_x=(bias_x, 3 * H))
    T, B, H = _check_shapes("ln_gru_sequence", xg, {"h0": h0}, w_hh, 3, vectors)
    if _kernels.applies_rnn(xg):  # CUDA: the Triton step kernels (layernorm.kernels)
        return _kernels.ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths,
                                        eps, gain_x, bias_x)
    xg, gain_x, bias_x = _input_ln("ln_gru_sequence", xg, gain_x, bias_x, (2 * H, H), eps)
    order, batch_sizes, blocks = _prepare_lengths(lengths, T, B)
    params = (w_hh, gain_h, bias_h, gain_u, bias_u, gain_x, bias_x)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (xg, h0, *params))

    def run(xg_, h0_, *rest):
        if needs_grad:
            return _LNGRUFunction.apply(xg_, h0_, *rest, batch_sizes, blocks, eps)
        with torch.no_grad():
            lib = _native_lib(xg_)
            if lib is not None:
                return _gru_forward_native(lib, xg_, h0_, *rest, batch_sizes, eps,
                                           save=False)[:2]
            return _gru_forward(xg_, h0_, *rest[:5], batch_sizes, blocks, eps, save=False)[:2]

    return _with_order(run, order, xg.contiguous(), (h0,), params, T)
