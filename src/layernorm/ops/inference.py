"""Inference with the input GEMM inside the C time loop (docs/rnnfast.md): one layer and
direction of ``layernorm.LSTM`` / ``GRU`` (norm="layer") forward from its raw input where no
graph is wanted, nothing saved for a backward and no (T, B, G) input term written.
``ln_inference`` is the modules' one entry: None where the kernels do not apply.

In bfloat16 (a bfloat16 module, or ``torch.autocast("cpu", torch.bfloat16)``) on a build with
the CPU's bfloat16 dot products (AVX512-BF16, ``-march=native``) the two products of a step read
x_t and h_{t-1} rounded to bfloat16 and the weights in bfloat16, with float32 accumulation; the
statistics, gates and states stay float32, and the results are rounded to bfloat16 once (as
the operator path's). Elsewhere bfloat16 takes the operator path."""
from __future__ import annotations

import torch

from .gemm import _panels, _panels_bf16
from . import dispatch, native
from .native import GRUArgs, LSTMArgs, contig, int32, threads
from .pool import _buffer


def choose(x: torch.Tensor, *tensors: torch.Tensor) -> torch.dtype | None:
    """Where the inference kernels run, asked once (``dispatch.where``) -> the dtype of their
    products, or None where they do not run. They run where nothing is saved for a backward
    (grad mode off, or no tensor requires grad), in eager mode with the C kernels loaded, every
    tensor on the CPU, no torch.func transform or ONNX capture, and either all float32 with
    autocast off (float32), or in bfloat16 (all bfloat16 and autocast off, or autocast to
    bfloat16 on float32 / bfloat16 tensors) where the kernels have the CPU's bfloat16 dot
    products (bfloat16)."""
    tensors = (x, *tensors)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None
    where = dispatch.where(*tensors)
    if where.lib is None or not where.eager or where.transformed or where.onnx \
            or any(t.device.type != "cpu" for t in tensors):
        return None
    dtypes = {t.dtype for t in tensors}
    if where.autocast is not None:
        if where.autocast != torch.bfloat16 or not dtypes <= {torch.float32, torch.bfloat16}:
            return None
        dtypes = {torch.bfloat16}
    if dtypes == {torch.float32}:
        return torch.float32
    if dtypes == {torch.bfloat16} and where.lib.bf16_dot():
        return torch.bfloat16
    return None


def _inference(kernel: str, cls, who: str, dtype, x: torch.Tensor, states, w_ih: torch.Tensor,
               w_hh: torch.Tensor, batch_sizes, eps: float, **fields):
    """One layer and direction forward with the input GEMM inside the kernel (``x`` and the
    panels of ``w_ih``): no (T, B, G) input term is written, nothing is saved. ``states``: the
    initial states (h0 first), copied into the final ones. ``dtype``: the products' (``choose``;
    None: bfloat16 where every tensor is, else float32). In bfloat16 the kernel
    reads float32 copies of x, the states and the LN parameters and the bfloat16 panels of the
    weights; its results are rounded to bfloat16."""
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
    native.call(lib, kernel, cls, who, T=T, B=B, H=H, nthreads=threads(B), eps=eps,
                batch_sizes=int32(batch_sizes), x=contig(x), I=I, h0=contig(states[0]), out=out,
                **weights, **{k: contig(v) for k, v in fields.items()})
    if out_dtype is not None:
        return tuple(t.to(out_dtype) for t in (out, *finals))
    return (out, *finals)


def ln_lstm_inference(x, h0, c0, w_ih, w_hh, gain_x, bias_x, gain_h, bias_h, gain_c, bias_c,
                      batch_sizes=None, eps=1e-5, dtype=None):
    """``layernorm.LSTM``'s layer (norm="layer") forward from its raw input x (T, B, I), for
    inference (where ``choose`` holds; ``dtype`` its answer): out = ``ln_lstm_sequence(
    F.linear(x, w_ih), h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x=gain_x,
    bias_x=bias_x, batch_sizes=batch_sizes)``,
    the same sums as the C path of that call, with W_x x_t computed step by step inside the time
    loop. -> out (T, B, H), h_n, c_n (B, H); batch_sizes: None or as ``PackedSequence``'s (rows
    sorted by decreasing length)."""
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


# the parameters ``ln_inference`` takes, in order, by the modules' names
INFERENCE_PARAMS = {
    "LSTM": ("weight_ih", "weight_hh", "gain_ih", "bias_ih", "gain_hh", "bias_hh", "gain_c",
             "bias_c"),
    "GRU": ("weight_ih", "weight_hh", "gain_ih", "bias_ih", "gain_hh", "bias_hh")}


def ln_inference(mode: str, x: torch.Tensor, state, params, batch_sizes, eps: float):
    """One layer and direction of ``layernorm.LSTM`` / ``GRU`` (norm="layer") from its raw input
    where the inference kernels run (``choose``): ``params`` the layer's tensors named by
    ``INFERENCE_PARAMS[mode]``, ``state`` (h0, c0) or (h0,). -> (out, states), or None where
    they do not run (the caller runs the operator)."""
    dtype = choose(x, *state, *params)
    if dtype is None:
        return None
    if mode == "LSTM":
        out, h, c = ln_lstm_inference(x, state[0], state[1], *params, batch_sizes=batch_sizes,
                                      eps=eps, dtype=dtype)
        return out, (h, c)
    w_ih, w_hh, gain_x, bias_x, gain_hh, bias_hh = params
    H2 = 2 * w_hh.shape[1]      # LN over (r, z) jointly, and over U h: split gain_hh, bias_hh
    out, h = ln_gru_inference(x, state[0], w_ih, w_hh, gain_x, bias_x, gain_hh[:H2],
                              bias_hh[:H2], gain_hh[H2:], bias_hh[H2:],
                              batch_sizes=batch_sizes, eps=eps, dtype=dtype)
    return out, (h,)
