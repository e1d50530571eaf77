"""Inference with the input GEMM inside the C time loop (docs/rnnfast.md): one layer and
direction of ``layernorm.LSTM`` / ``GRU`` (norm="layer") forward from its raw input where no
graph is wanted, nothing saved for a backward and no (T, B, G) input term written. Whether
they run is ``sequence.choose_inference``'s answer (with the other choices of a whole-sequence
call), and ``sequence.ln_inference`` calls them there: a call that records a graph never comes
here.

In bfloat16 (a bfloat16 module, or ``torch.autocast("cpu", torch.bfloat16)``) on a build with
the CPU's bfloat16 dot products (AVX512-BF16, ``-march=native``) the two products of a step read
x_t and h_{t-1} rounded to bfloat16 and the weights in bfloat16, with float32 accumulation; the
statistics, gates and states stay float32, and the results are rounded to bfloat16 once (as
the operator path's). Elsewhere bfloat16 takes the operator path."""
from __future__ import annotations

import time

import torch

from .gemm import _panels, _panels_bf16
from . import native
from .native import GRUArgs, LSTMArgs, contig, int32
from .common import _buffer

# How the threads split an inference call's products (the C ``forward_seq``): each its rows of the
# batch (path 2) or each its columns of the products for every row (path 1, ``forward_seq_cols``;
# 0: the C's rule, columns below 8 rows a thread). Both give the same bits. At 4-7 rows a thread
# which is faster depends on the CPU: measured at T 100, I 128 on 2 threads, the rows' split took
# 0.94-1.31x the columns' time at batch 8, H 256-512, on AVX-512 cores of ~220 GFLOP/s, and
# 0.80-0.94x at batch 8-12 on cores of 113 (docs/rnnfast.md). So the first calls of each such
# shape time both in turn, ``SPLIT_TRIES`` calls each, and the faster (the least time a step) is
# kept for the process.
SPLIT_TRIES = 3
_SPLITS: dict[tuple, list | int] = {}  # shape -> [times of path 1, of path 2], then the path


def _split(key: tuple, batch: int, nthreads: int) -> tuple[int, list | None]:
    """The path of this call (``forward_seq``'s) and the list its time a step goes into (None:
    chosen already, or a batch where the C's rule holds)."""
    if nthreads < 2 or not 4 * nthreads <= batch < 8 * nthreads:
        return 0, None
    found = _SPLITS.setdefault(key, [[], []])
    if isinstance(found, int):
        return found, None
    path = 1 if len(found[0]) <= len(found[1]) else 2
    return path, found[path - 1]


def _timed(key: tuple, times: list, seconds: float) -> None:
    """Record one timed call; after ``SPLIT_TRIES`` of each path keep the faster."""
    times.append(seconds)
    found = _SPLITS.get(key)
    if isinstance(found, list) and min(map(len, found)) >= SPLIT_TRIES:
        _SPLITS[key] = 1 if min(found[0]) <= min(found[1]) else 2


def _inference(kernel: str, cls, who: str, dtype, x: torch.Tensor, states, w_ih: torch.Tensor,
               w_hh: torch.Tensor, batch_sizes, eps: float, **fields):
    """One layer and direction forward with the input GEMM inside the kernel (``x`` and the
    panels of ``w_ih``): no (T, B, G) input term is written, nothing is saved. ``states``: the
    initial states (h0 first), copied into the final ones. ``dtype``: the products'
    (``sequence.choose_inference``; None: bfloat16 where every tensor is, else float32). In
    bfloat16 the kernel reads float32 copies of x, the states and the LN parameters and the
    bfloat16 panels of the weights; its results are rounded to bfloat16."""
    lib = native.load()
    T, B, I = x.shape
    H, G = states[0].shape[-1], w_hh.shape[0]
    if w_ih.shape != (G, I) or w_hh.shape != (G, H) or x.dim() != 3:
        raise RuntimeError(f"internal: {who}: x {tuple(x.shape)}, w_ih {tuple(w_ih.shape)}, "
                           f"w_hh {tuple(w_hh.shape)} do not fit (T, B, I), (G, I), (G, H)")
    width = lib.panel_width()
    if dtype is None:
        dtype = torch.bfloat16 if {t.dtype for t in (x, *states, w_ih, w_hh)} == \
            {torch.bfloat16} else torch.float32
    if dtype == torch.bfloat16:
        out_dtype = torch.bfloat16
        weights = dict(wxpb=_panels_bf16(w_ih, width), wpb=_panels_bf16(w_hh, width))
        x, states = x.float(), [s.float() for s in states]
        fields = {k: None if v is None else v.float() for k, v in fields.items()}
    else:
        out_dtype = None
        weights = dict(wxp=_panels(w_ih, width), wp=_panels(w_hh, width))
    out = _buffer(T, B, H, like=x, zero=batch_sizes is not None)
    finals = [s.detach().clone(memory_format=torch.contiguous_format) for s in states]
    fields.update(zip(("h_n", "c_n"), finals))
    # torch's threads: the kernel splits the rows among them, 4 a thread at least, or where the
    # batch is smaller than that, the columns of the products (``forward_seq_cols``; ``_split``)
    nthreads = torch.get_num_threads()
    key = (kernel, dtype, B, H, I, nthreads)
    path, times = _split(key, B, nthreads)
    start = time.perf_counter()
    native.call(lib, kernel, cls, who, T=T, B=B, H=H, nthreads=nthreads, eps=eps, path=path,
                batch_sizes=int32(batch_sizes), x=contig(x), I=I, h0=contig(states[0]), out=out,
                **weights, **{k: contig(v) for k, v in fields.items()})
    if times is not None:
        _timed(key, times, (time.perf_counter() - start) / max(T, 1))
    if out_dtype is not None:
        return tuple(t.to(out_dtype) for t in (out, *finals))
    return (out, *finals)


def ln_lstm_inference(x, h0, c0, w_ih, w_hh, gain_x, bias_x, gain_h, bias_h, gain_c, bias_c,
                      batch_sizes=None, eps=1e-5, dtype=None):
    """``layernorm.LSTM``'s layer (norm="layer") forward from its raw input x (T, B, I), for
    inference (where ``sequence.choose_inference`` holds; ``dtype`` its answer): out =
    ``ln_lstm_sequence(F.linear(x, w_ih), h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c,
    gain_x=gain_x, bias_x=bias_x, batch_sizes=batch_sizes)``, the same sums as the C path of
    that call, with W_x x_t computed step by step inside the time loop. -> out (T, B, H), h_n,
    c_n (B, H); batch_sizes: None or as ``PackedSequence``'s (rows sorted by decreasing
    length)."""
    return _inference("lstm_forward_seq", LSTMArgs, "ln_lstm_inference", dtype, x, (h0, c0), w_ih,
                      w_hh, batch_sizes, eps, gain_x=gain_x, bias_x=bias_x, gain_h=gain_h,
                      bias_h=bias_h, gain_c=gain_c, bias_c=bias_c)


def ln_gru_inference(x, h0, w_ih, w_hh, gain_x, bias_x, gain_h, bias_h, gain_u, bias_u,
                     batch_sizes=None, eps=1e-5, dtype=None):
    """The LN-GRU's ``ln_lstm_inference``: ``ln_gru_sequence(F.linear(x, w_ih), h0, w_hh, gain_h,
    bias_h, gain_u, bias_u, gain_x=gain_x, bias_x=bias_x, ...)`` -> out (T, B, H), h_n (B, H)."""
    return _inference("gru_forward_seq", GRUArgs, "ln_gru_inference", dtype, x, (h0,), w_ih, w_hh,
                      batch_sizes, eps, gain_x=gain_x, bias_x=bias_x, gain_h=gain_h,
                      bias_h=bias_h, gain_u=gain_u, bias_u=bias_u)
