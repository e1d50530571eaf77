"""The BN-LSTM and BN-GRU of one layer and one direction (Cooijmans et al. 2016, "Recurrent
Batch Normalization"; the readable path is ``layernorm.rnn.terms.BatchTerm`` in THE loop) with
their recurrence in the C kernels ``bn_lstm_*`` / ``bn_gru_*`` (``_rnn_steps.c``;
docs/rnnfast.md, "The fused BN-LSTM and BN-GRU")::

    LSTM  gates = BN_t(W_x x_t; gain_ih, bias_ih) + BN_t(W_h h_{t-1}; gain_hh, bias_hh)
          c_t   = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g)
          h_t   = sigmoid(o) tanh(BN_t(c_t; gain_c, bias_c))
    GRU   a_x, a_h = BN_t(W_x x_t; gain_ih, bias_ih), BN_t(W_hh h_{t-1}; gain_hh, bias_hh)
          r, z = sigmoid(a_x + a_h) over 2H,  n = tanh(a_x,n + r a_h,n),  h_t = n + z (h_{t-1} - n)

Every batch norm takes the statistics of step t over the examples active at t: the kernels
reduce them over the batch inside the time loop, forward and backward, for the recurrent term
(and the LSTM's cell), and for the input term too (its statistics depend on x only, but folding
it into the step saves the passes over (T, B, G) that torch's batch norm and its layout copies
cost, as the LN-LSTM folds its input LN); W_x x itself is one GEMM over all steps before the
loop. A step uses batch statistics in training when at least two examples are active; otherwise
(eval, or one active example) the running statistics of slot min(t, last trained slot), as the
readable path. The kernels return every batch step's mean and biased variance; the running
statistics are then updated by the caller's callback (``layernorm.rnn`` passes
``BatchTerm._update``, which also reports them to ``observe_batch_stats``' observers, as the
readable path does): the operators take tensors and never read the module.

Second order (``create_graph=True``): the backward re-runs the recurrence as a differentiable loop
of torch ops (the reference step ``lstm_step`` / ``gru_step`` in THE loop, with the statistics
of the forward's fixed steps), as the LN operators do (``common.differentiable_backward``).

Where it runs is ``bn_direction``'s choice, once per call (``native.where``): eager mode, plain
CPU float32 tensors, the C kernels loaded, no autocast, no torch.func transform, no forward-mode
AD, no ONNX capture; elsewhere it returns None and the module's readable path runs.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from .. import functional as LF
from ..recurrence import gru_step, lstm_step, run_direction
from . import common, native
from .gemm import _panels, input_linear
from .common import _WORKSPACE, _buffer
from .native import contig as _contig

WHO, WHO_GRU = "LSTM(norm='batch')", "GRU(norm='batch')"


def _runs(sizes: Sequence[int], flags: Sequence[bool]):
    """(t0, t1, n): maximal ranges of batch-statistics steps with the same active count n."""
    t = 0
    while t < len(sizes):
        if not flags[t]:
            t += 1
            continue
        t1 = t
        while t1 < len(sizes) and flags[t1] and sizes[t1] == sizes[t]:
            t1 += 1
        yield t, t1, int(sizes[t])
        t = t1


def bn_direction(mode: str, x: Tensor, state: tuple[Tensor, ...], weight_ih: Tensor,
                 params: tuple[Tensor, ...], running: dict, last_slot, update,
                 batch_sizes: Sequence[int] | None, *, training: bool, eps: float, who: str,
                 h_mask: Tensor | None = None, zone_h: Tensor | None = None,
                 zone_c: Tensor | None = None):
    """One direction of a BN-LSTM / BN-GRU (``mode``) in the C kernels: x (T, B, I) in
    processing order -> (out (T, B, H), final state), the running statistics updated in
    training; or None where the kernels do not run (``native.where``: eager mode, plain CPU
    float32 tensors, the C kernels loaded, no autocast, torch.func transform, forward-mode AD or
    ONNX capture), and the caller runs its readable loop.

    ``params``: the direction's tensors in the order of ``PARAMS[mode]``; ``running``: each
    term's running (mean, var) buffers (max_length, width), by name ("hh", "ih" and for the
    LSTM "c"); ``last_slot``: the last step whose running statistics were trained (an int or a
    0-d tensor; steps that read running statistics use slot min(t, last_slot));
    ``update(name, t0, mean, var, n)``: called in training with the batch statistics (rows
    (k, width), biased variance) of steps t0 .. t0 + k - 1 of term ``name`` over n examples;
    ``who``: the module's name in error messages.

    The recurrent regularizers (docs/rnn.md; None = off), in the same processing order:
    ``h_mask`` (B, H) recurrent dropout on h_{t-1} where it enters W_hh; ``zone_h`` (and for the
    LSTM ``zone_c``) (T, B, H) zoneout of the new state. The masks get no gradient.

    A packed training batch whose last steps have one active example runs in two calls: the
    readable path's single-example steps read running statistics that its earlier steps of the
    same call have just updated (slot min(t, last trained slot)), so those steps (one example:
    row 0) run after the first call's updates."""
    tensors = (x, *state, weight_ih, *params, *(b for pair in running.values() for b in pair))
    if native.where(*tensors).c(*tensors) is None:
        return None
    xw = input_linear(x, weight_ih, pooled=True)                # W_x x (T, B, G)
    T, B, _ = xw.shape
    masks = _masks(mode, state[0].shape[-1], T, B, xw, h_mask, zone_h, zone_c)
    sizes = [B] * T if batch_sizes is None else torch.as_tensor(batch_sizes).tolist()
    if training:  # the readable input term's check: batch statistics need two examples
        LF.check_batch_size(xw[0, :sizes[0]], who)
    run = _Direction(mode, params, running, last_slot, update, training, eps)
    split = next((t for t, n in enumerate(sizes) if n < 2), T) if training else T
    if split == T:
        return run(xw, state, batch_sizes, 0, masks)
    head = [None if m is None else (m if k == 0 else m[:split]) for k, m in enumerate(masks)]
    rest = [None if m is None else (m[:1] if k == 0 else m[split:, :1].contiguous())
            for k, m in enumerate(masks)]
    out, states = run(xw[:split], state, sizes[:split], 0, head)
    tail, last = run(xw[split:, :1], tuple(s[:1] for s in states), None, split, rest)
    out = torch.cat([out, torch.cat([tail, tail.new_zeros(T - split, B - 1, tail.shape[-1])],
                                    1)])
    return out, tuple(torch.cat([a, s[1:]]) for a, s in zip(last, states))


def _masks(mode: str, H: int, T: int, B: int, xw: Tensor, h_mask, zone_h, zone_c) -> list:
    """The regularizers' masks checked ((B, H) / (T, B, H)), detached, float32, contiguous:
    [h_mask, zone_h] and for the LSTM zone_c."""
    who = WHO if mode == "LSTM" else WHO_GRU
    if mode != "LSTM" and zone_c is not None:
        raise ValueError(f"{who} has no cell state: zone_c must be None, received a tensor.")
    given = {"h_mask": h_mask, "zone_h": zone_h}
    if mode == "LSTM":
        given["zone_c"] = zone_c
    common.check_masks(who, xw, T, B, H, **given)
    return common.prepare_masks(given.values(), xw.dtype, None)


# per mode: the direction's parameters, in the autograd Functions' order after the states
PARAMS = {"LSTM": ("weight_hh", "gain_hh", "bias_hh", "gain_c", "bias_c", "gain_ih", "bias_ih"),
           "GRU": ("weight_hh", "gain_hh", "bias_hh", "gain_ih", "bias_ih")}


class _Direction:
    """The tensors of one direction and one call; ``self(xw, state, batch_sizes, t0, masks)``
    runs steps t0 .. t0 + len(xw) - 1 in one kernel call (``batch_sizes`` of those steps, or
    None), then reports their batch statistics in training. The kernel's statistics come in the
    order of ``names`` (each term's (T, width) mean, then var)."""

    def __init__(self, mode, params, running, last_slot, update, training, eps):
        self.mode, self.params, self.running, self.last_slot = mode, params, running, last_slot
        self.update, self.training, self.eps = update, training, float(eps)
        self.names = ("hh", "c", "ih") if mode == "LSTM" else ("hh", "ih")

    def __call__(self, xw, state, batch_sizes, t0: int, masks):
        T, B, G = xw.shape
        H = state[0].shape[-1]
        sizes = [B] * T if batch_sizes is None else torch.as_tensor(batch_sizes).tolist()
        flags = [bool(self.training and n >= 2) for n in sizes]
        fixed = [t for t in range(T) if not flags[t]]
        stats = []
        for name in self.names:
            for buf in self.running[name]:       # the fixed steps' rows: running statistics
                rows = xw.new_empty(T, H if name == "c" else G)
                if fixed:
                    steps = torch.tensor(fixed)
                    slots = (steps + t0).clamp(max=self.last_slot)
                    rows[steps] = buf.detach()[slots]
                stats.append(rows)
        sizes_t = None if batch_sizes is None else torch.as_tensor(sizes)
        fn = _BNLSTM if self.mode == "LSTM" else _BNGRU
        out, *rest = fn.apply(xw, *state, *self.params, *stats, sizes_t, flags, self.eps, *masks)
        states, found = rest[:len(state)], rest[len(state):]
        if self.training:
            for k, name in enumerate(self.names):
                mean, var = found[2 * k], found[2 * k + 1]
                for lo, hi, n in _runs(sizes, flags):
                    self.update(name, t0 + lo, mean[lo:hi], var[lo:hi], n)
        return out, tuple(states)


class _BNLSTM(torch.autograd.Function):
    """The recurrence on the C kernels: (xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c,
    gain_x, bias_x, then the (T, G) / (T, H) mean_h, var_h, mean_c, var_c, mean_x, var_x with the
    fixed steps' rows, batch_sizes, flags, eps) -> out, h_n, c_n and the six statistics with
    every step's rows (the batch steps' batch mean and biased variance; not differentiable).
    Last, the regularizers' masks h_mask, zone_h, zone_c (or None; no gradient)."""

    @staticmethod
    def forward(ctx, xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, mean_h,
                var_h, mean_c, var_c, mean_x, var_x, batch_sizes, flags, eps, h_mask=None,
                zone_h=None, zone_c=None):
        lib = native.loaded(WHO)
        xg = xg.contiguous()
        T, B, G = xg.shape
        H = G // 4
        save = any(ctx.needs_input_grad[:10])
        saved = [None] * 4
        if save:  # cs, hg_all, act_all, tc_all
            saved = [_WORKSPACE.get(shape, like=xg) for shape in (
                (T + 1, B, H), (T, B, G), (T, B, G), (T, B, H))]
            saved[0][0] = c0
        stats = [s.clone() for s in (mean_h, var_h, mean_c, var_c, mean_x, var_x)]
        out = _buffer(T, B, H, like=xg, zero=batch_sizes is not None)
        h_n, c_n = (s.detach().clone(memory_format=torch.contiguous_format) for s in (h0, c0))
        flags_t = torch.tensor(flags, dtype=torch.int32)
        native.call(lib, "bn_lstm_forward_seq", native.BNLSTMArgs, WHO, T=T, B=B, H=H,
                     nthreads=native.threads(B), eps=eps,
                     batch_sizes=native.int32(batch_sizes), batch_stats=flags_t, xw=xg,
                     gain_x=_contig(gain_x), bias_x=_contig(bias_x),
                     wp=_panels(w_hh, lib.panel_width()), gain_h=_contig(gain_h),
                     bias_h=_contig(bias_h), gain_c=_contig(gain_c), bias_c=_contig(bias_c),
                     h0=_contig(h0), out=out, h_n=h_n, c_n=c_n, cs=saved[0], hg_all=saved[1],
                     act_all=saved[2], tc_all=saved[3], mean_h=stats[0], var_h=stats[1],
                     mean_c=stats[2], var_c=stats[3], mean_x=stats[4], var_x=stats[5],
                     h_mask=h_mask, zone_h=zone_h, zone_c=zone_c)
        ctx.mark_non_differentiable(*stats)
        ctx.flags, ctx.eps, ctx.save = flags, eps, save
        ctx.masks = (h_mask, zone_h, zone_c)
        ctx.batch_sizes = batch_sizes
        if save:
            ctx.save_for_backward(xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x,
                                  bias_x, out,
                                  *saved, *stats)
        return out, h_n, c_n, *stats

    @staticmethod
    def backward(ctx, grad_out, grad_hn, grad_cn, *_):
        kept = ctx.saved_tensors
        inputs, out, saved, stats = kept[:10], kept[10], kept[11:15], kept[15:]
        sizes = None if ctx.batch_sizes is None else ctx.batch_sizes.tolist()
        if torch.is_grad_enabled():  # create_graph=True: differentiate the differentiable loop
            found = common.differentiable_backward(
                lambda *xs: _loop(*xs, sizes, ctx.flags, stats, ctx.eps, *ctx.masks), inputs,
                ctx.needs_input_grad[:10], (grad_out, grad_hn, grad_cn))
            return (*found, *(None,) * 12)
        xg, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, _ = inputs
        T, B, G = xg.shape
        H = G // 4
        lib = native.loaded(WHO)
        dxg = common.grad_buffer(xg, ctx.batch_sizes is not None)
        dh, dc = (gr.detach().clone(memory_format=torch.contiguous_format)
                  for gr in (grad_hn, grad_cn))
        dparams = torch.zeros(4 * G + 2 * H, dtype=torch.float64)
        cs, hg_all, act_all, tc_all = saved
        dw_hh = common.native_backward(
            lib, "bn_lstm_backward_seq", native.BNLSTMArgs, WHO, _contig(h0), out,
            ctx.batch_sizes, G, T=T, B=B, H=H, nthreads=native.threads(B), eps=ctx.eps,
            batch_stats=torch.tensor(ctx.flags, dtype=torch.int32),
            wtp=_panels(w_hh, lib.panel_width(), transposed=True), gain_h=_contig(gain_h),
            gain_c=_contig(gain_c), gain_x=_contig(gain_x), xw=xg,
            grad_out=grad_out.contiguous(), cs=cs, hg_all=hg_all,
            act_all=act_all, tc_all=tc_all, mean_h=stats[0], var_h=stats[1], mean_c=stats[2],
            var_c=stats[3], mean_x=stats[4], var_x=stats[5], dh=dh, dc=dc, dxg=dxg,
            dparams=dparams, h_mask=ctx.masks[0], zone_h=ctx.masks[1], zone_c=ctx.masks[2])
        dparams = dparams.to(xg.dtype).split([G, G, H, H, G, G])
        return (dxg, dh, dc, dw_hh, *dparams, *(None,) * 12)


def _norm(gain, bias, mean, var, flags, eps):
    """A batch-norm term of the differentiable loops: batch statistics of the active rows at the
    flagged steps, the given mean / var (rows of step t) elsewhere."""
    def f(a, t):
        if flags[t]:
            m = a.mean(0)
            v = (a - m).square().mean(0)
        else:
            m, v = mean[t], var[t]
        return (a - m) * torch.rsqrt(v + eps) * gain + bias
    return f


def _loop(xw, h0, c0, w_hh, gain_h, bias_h, gain_c, bias_c, gain_x, bias_x, sizes, flags, stats,
          eps, h_mask=None, zone_h=None, zone_c=None):
    """The same recurrence in plain differentiable torch ops (the reference step in THE loop):
    batch statistics of the active rows at the flagged steps, the given ones elsewhere; the
    regularizers as given."""
    mean_h, var_h, mean_c, var_c, mean_x, var_x = stats
    norm_hh = _norm(gain_h, bias_h, mean_h, var_h, flags, eps)
    norm_c = _norm(gain_c, bias_c, mean_c, var_c, flags, eps)
    norm_x = _norm(gain_x, bias_x, mean_x, var_x, flags, eps)
    out, (h, c) = run_direction(
        lambda x, s, t, h_mask=None: lstm_step(norm_x(x, t), s[0], s[1], w_hh, norm_hh, norm_c,
                                               t, h_mask=h_mask), xw,
        (h0, c0), batch_sizes=sizes, h_mask=h_mask, zone=common.zone_arg(zone_h, zone_c))
    return out, h, c


class _BNGRU(torch.autograd.Function):
    """The BN-GRU recurrence on the C kernels: (xw, h0, w_hh, gain_h, bias_h, gain_x, bias_x,
    then the (T, G) mean_h, var_h, mean_x, var_x with the fixed steps' rows, batch_sizes, flags,
    eps, then the masks h_mask, zone_h) -> out, h_n and the four statistics (as ``_BNLSTM``)."""

    @staticmethod
    def forward(ctx, xg, h0, w_hh, gain_h, bias_h, gain_x, bias_x, mean_h, var_h, mean_x, var_x,
                batch_sizes, flags, eps, h_mask=None, zone_h=None):
        lib = native.loaded(WHO)
        xg = xg.contiguous()
        T, B, G = xg.shape
        H = G // 3
        save = any(ctx.needs_input_grad[:7])
        saved = [_WORKSPACE.get((T, B, G), like=xg) for _ in range(2)] if save else [None] * 2
        stats = [s.clone() for s in (mean_h, var_h, mean_x, var_x)]
        out = _buffer(T, B, H, like=xg, zero=batch_sizes is not None)
        h_n = h0.detach().clone(memory_format=torch.contiguous_format)
        flags_t = torch.tensor(flags, dtype=torch.int32)
        native.call(lib, "bn_gru_forward_seq", native.BNGRUArgs, WHO_GRU, T=T, B=B, H=H,
                     nthreads=native.threads(B), eps=eps,
                     batch_sizes=native.int32(batch_sizes), batch_stats=flags_t, xw=xg,
                     gain_x=_contig(gain_x), bias_x=_contig(bias_x),
                     wp=_panels(w_hh, lib.panel_width()), gain_h=_contig(gain_h),
                     bias_h=_contig(bias_h), h0=_contig(h0), out=out, h_n=h_n,
                     hg_all=saved[0], act_all=saved[1], mean_h=stats[0], var_h=stats[1],
                     mean_x=stats[2], var_x=stats[3], h_mask=h_mask, zone_h=zone_h)
        ctx.mark_non_differentiable(*stats)
        ctx.flags, ctx.eps, ctx.batch_sizes = flags, eps, batch_sizes
        ctx.masks = (h_mask, zone_h)
        if save:
            ctx.save_for_backward(xg, h0, w_hh, gain_h, bias_h, gain_x, bias_x, out, *saved,
                                  *stats)
        return out, h_n, *stats

    @staticmethod
    def backward(ctx, grad_out, grad_hn, *_):
        kept = ctx.saved_tensors
        inputs, out, saved, stats = kept[:7], kept[7], kept[8:10], kept[10:]
        sizes = None if ctx.batch_sizes is None else ctx.batch_sizes.tolist()
        if torch.is_grad_enabled():  # create_graph=True: differentiate the differentiable loop
            found = common.differentiable_backward(
                lambda *xs: _gru_loop(*xs, sizes, ctx.flags, stats, ctx.eps, *ctx.masks), inputs,
                ctx.needs_input_grad[:7], (grad_out, grad_hn))
            return (*found, *(None,) * 9)
        xg, h0, w_hh, gain_h, bias_h, gain_x, _ = inputs
        T, B, G = xg.shape
        lib = native.loaded(WHO)
        dxg = common.grad_buffer(xg, ctx.batch_sizes is not None)
        dh = grad_hn.detach().clone(memory_format=torch.contiguous_format)
        dparams = torch.zeros(4 * G, dtype=torch.float64)
        dw_hh = common.native_backward(
            lib, "bn_gru_backward_seq", native.BNGRUArgs, WHO_GRU, _contig(h0), out,
            ctx.batch_sizes, G, T=T, B=B, H=G // 3, nthreads=native.threads(B), eps=ctx.eps,
            batch_stats=torch.tensor(ctx.flags, dtype=torch.int32),
            wtp=_panels(w_hh, lib.panel_width(), transposed=True), gain_h=_contig(gain_h),
            bias_h=_contig(bias_h), gain_x=_contig(gain_x), xw=xg,
            grad_out=grad_out.contiguous(), hg_all=saved[0],
            act_all=saved[1], mean_h=stats[0], var_h=stats[1], mean_x=stats[2],
            var_x=stats[3], dh=dh, dxg=dxg, dparams=dparams, h_mask=ctx.masks[0],
            zone_h=ctx.masks[1])
        dgain_h, dbias_h, dgain_x, dbias_x = dparams.to(xg.dtype).split([G] * 4)
        return (dxg, dh, dw_hh, dgain_h, dbias_h, dgain_x, dbias_x, *(None,) * 9)


def _gru_loop(xw, h0, w_hh, gain_h, bias_h, gain_x, bias_x, sizes, flags, stats, eps,
              h_mask=None, zone_h=None):
    """The BN-GRU in plain differentiable torch ops (``gru_step`` in THE loop), as ``_loop``."""
    mean_h, var_h, mean_x, var_x = stats
    norm_hh, norm_x = _norm(gain_h, bias_h, mean_h, var_h, flags, eps), _norm(
        gain_x, bias_x, mean_x, var_x, flags, eps)
    out, (h,) = run_direction(
        lambda x, s, t, h_mask=None: gru_step(norm_x(x, t), s[0], w_hh, norm_hh, t,
                                              h_mask=h_mask),
        xw, (h0,), batch_sizes=sizes, h_mask=h_mask, zone=common.zone_arg(zone_h))
    return out, h
