"""The LN-LSTM and LN-GRU over a whole sequence: their entries ``ln_lstm_sequence`` /
``ln_gru_sequence`` (the checks, then one call of ``run_sequence``, which runs the path that
``native.Where.sequence`` names, chosen once among a cell's ``Backends``: the Triton kernels, the
registered operator on the C kernels, the reference loop under autograd; and before it, for a
module's layer from its raw input, whether the inference kernels run with no graph:
``ln_inference``, ``choose_inference``), and the operators' autograd (``register_autograd``:
first order through the cell's backward operator, second order by differentiating its reference
loop; ``reference_grads``, the Triton kernels' second order).

Read downward: the modules call the entries here; the frame calls each cell's backends (``lstm``,
``gru``: the C calls, the operators' bodies, the reference loop) and the shared helpers
(``common``), which call nothing above them.

Where the C kernels do not run (float64, no C compiler, ``USE_NATIVE = False``, CUDA without
Triton) and under torch.func transforms, an entry runs the reference step in the reference loop
(``layernorm.recurrence``) under ordinary autograd: one form of the step besides the kernels
(its cost: docs/rnnfast.md, "Where the C kernels do not run"). Second order: with
``create_graph=True`` the operator's backward re-runs the forward as that loop and
differentiates it, so double backward is exact.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from .. import kernels
from .._autograd import differentiable_backward
from ..functional import stats_dtype
from ..recurrence import lengths as _lengths
from . import common, gru as _gru, inference, lstm as _lstm, native
from .common import dtypes, input_ln, prepare_masks
from .common import cast


def with_order(fn, order, xg: torch.Tensor, states: tuple):
    """Run ``fn(xg, *states)`` on the batch sorted by decreasing length; results back in order."""
    if order is None:
        return fn(xg, *states)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())
    order_d, inverse_d = order.to(xg.device), inverse.to(xg.device)
    out, *finals = fn(xg.index_select(1, order_d), *(s.index_select(0, order_d) for s in states))
    return (out.index_select(1, inverse_d), *(f.index_select(0, inverse_d) for f in finals))


class Backends(NamedTuple):
    """One cell's implementations of a whole sequence, among which ``run_sequence`` chooses once
    per call. Each takes ``(xg, *states, w_hh, *LN gains and biases, ...)``:

    ``triton``: the cell's name in the Triton kernels (``layernorm.kernels.sequence``, CUDA),
    which take ``order`` and ``batch_sizes`` and derive their per-example lengths themselves;
    ``native(eager)``: the registered operator on the C kernels (``register_autograd``'s
    function) called as ``(..., gain_x, bias_x, *masks, batch_sizes, eps, save)`` on the sorted
    batch, its body run directly where ``eager`` (same autograd);
    ``reference(..., batch_sizes, eps, *masks)``: the reference loop under autograd.
    ``groups``: the unit groups the input LN normalizes, in multiples of H."""
    triton: str
    native: Callable
    reference: Callable
    groups: tuple[int, ...]


def run_sequence(who, cell: Backends, where: native.Where, xg, states, params, gain_x, bias_x,
                 masks: dict, order, batch_sizes, eps):
    """``ln_*_sequence`` after its checks (``masks``: the checked regularizers by name, None where
    off; ``where``: the call's runtime answers, asked once by the entry): runs the path that
    ``where.sequence`` names, chosen once. The Triton kernels where they take xg (CUDA; not
    under torch.func transforms or forward-mode AD); the registered operator on the C kernels
    where they load and the compute dtype is float32 on the CPU (its body directly, with the
    same autograd, in eager mode on plain tensors); elsewhere (float64, no C compiler,
    ``USE_NATIVE = False``, CUDA without Triton, torch.func transforms and forward-mode AD, a
    ``torch.onnx.export`` capture) the cell's reference loop under ordinary autograd.
    -> (out, *final states) in the batch's order and in the output dtype."""
    compute, out_dtype = dtypes(xg, where.autocast)
    path = where.sequence(compute)          # THE choice (``native.Where.sequence``)
    if path == "triton":
        return kernels.sequence(cell.triton, xg, states, params, order, batch_sizes, eps,
                                gain_x, bias_x, masks)
    to = where.to   # (eager: a tensor of the dtype already taken as it is, a dozen times a call)
    masks = prepare_masks(masks.values(), compute, order)
    states = [to(t, compute) for t in states]  # xg below: in a pooled buffer where eager
    params = tuple(to(t, compute) for t in params)
    gain_x, bias_x = (None if t is None else to(t, compute) for t in (gain_x, bias_x))
    groups, n = tuple(k * states[0].shape[-1] for k in cell.groups), len(states)
    if path == "reference":
        xg, _, _ = input_ln(who, xg.to(compute), gain_x, bias_x, groups, eps, inside=False)

        def run(xg_, *states_):
            return cell.reference(xg_, *states_, *params, batch_sizes, eps, *masks)
    else:
        input_ln(who, xg, gain_x, bias_x, groups, eps, inside=True)  # checks the pair
        tensors = (xg, *states, *params, gain_x, bias_x)
        save = torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                for t in tensors)
        body = path == "body"
        xg = cast(xg, compute) if body else xg.to(compute)
        operator = cell.native(body)

        def run(xg_, *states_):
            return operator(xg_, *states_, *params, gain_x, bias_x, *masks, batch_sizes,
                            float(eps), save, out_dtype == torch.bfloat16)[:n + 1]
    outs = with_order(run, order, xg, tuple(states))
    return tuple(to(o, out_dtype) for o in outs)


# ---- without a graph: the inference kernels (``inference``)

def choose_inference(x: torch.Tensor, *tensors: torch.Tensor) -> torch.dtype | None:
    """Where the inference kernels run, asked once (``native.inference``; the rule is
    ``native.Where.inference``'s) -> the dtype of their products, or None where they do not."""
    return native.inference(x, *tensors)


# the parameters ``ln_inference`` takes, in order, by the modules' names
INFERENCE_PARAMS = {
    "LSTM": ("weight_ih", "weight_hh", "gain_ih", "bias_ih", "gain_hh", "bias_hh", "gain_c",
             "bias_c"),
    "GRU": ("weight_ih", "weight_hh", "gain_ih", "bias_ih", "gain_hh", "bias_hh")}


def ln_inference(mode: str, x: torch.Tensor, state, params, batch_sizes, eps: float):
    """One layer and direction of ``layernorm.LSTM`` / ``GRU`` (norm="layer") from its raw input
    where the inference kernels run (``choose_inference``): ``params`` the layer's tensors named
    by ``INFERENCE_PARAMS[mode]``, ``state`` (h0, c0) or (h0,). -> (out, states), or None where
    they do not run (the caller runs the operator, ``ln_lstm`` / ``ln_gru``)."""
    dtype = choose_inference(x, *state, *params)
    if dtype is None:
        return None
    if mode == "LSTM":
        out, h, c = inference.ln_lstm_inference(x, state[0], state[1], *params,
                                                batch_sizes=batch_sizes, eps=eps, dtype=dtype)
        return out, (h, c)
    w_ih, w_hh, gain_x, bias_x, gain_hh, bias_hh = params
    H2 = 2 * w_hh.shape[1]      # LN over (r, z) jointly, and over U h: split gain_hh, bias_hh
    out, h = inference.ln_gru_inference(x, state[0], w_ih, w_hh, gain_x, bias_x, gain_hh[:H2],
                                        bias_hh[:H2], gain_hh[H2:], bias_hh[H2:],
                                        batch_sizes=batch_sizes, eps=eps, dtype=dtype)
    return out, (h,)


def register_autograd(op, body, name, n_states, loop, first_order):
    """Register the autograd of ``op`` (inputs: ``*tensors, batch_sizes, eps, save``; outputs:
    out (T, B, H), ``n_states - 1`` final states and the saved buffers) -> ``runner(eager)``: a
    function with op's arguments that calls ``op``, or where ``eager`` its ``body`` under the
    same autograd (the choice made once, by ``run_sequence``).

    ``loop(*tensors, batch_sizes, eps)``: the cell's differentiable loop (input LN included),
    -> (out, *final states); used for second order (``create_graph=True``).
    ``first_order(tensors, batch_sizes, out, saved, grads, eager)``: the grads of ``tensors``
    through the cell's backward operator (its body where ``eager``), ``grads`` = (grad of out,
    *grads of the final states), None where not needed."""
    def setup(ctx, inputs, output, eager=False):
        *tensors, batch_sizes, eps, save, bf16 = inputs
        out, saved = output[0], output[n_states:]
        ctx.mark_non_differentiable(*saved)
        ctx.set_materialize_grads(False)
        ctx.eps, ctx.save, ctx.n_tensors, ctx.eager = eps, save, len(tensors), eager
        ctx.bf16 = bf16
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
            found = first_order(tensors, batch_sizes, out, saved, grads, ctx.eager, ctx.bf16)
        return (*found, None, None, None, None)  # batch_sizes, eps, save, bf16

    op.register_autograd(backward_, setup_context=lambda ctx, inputs, output: setup(
        ctx, inputs, output))

    class Eager(torch.autograd.Function):
        """``body`` with op's autograd. (forward(ctx, ...) rather than setup_context: apply()
        then skips binding the signature, ~15 us a call; only eager calls outside torch.func
        transforms come here.)"""
        @staticmethod
        def forward(ctx, *inputs):
            output = body(*inputs)
            setup(ctx, inputs, output, eager=True)
            return output
        backward = staticmethod(backward_)

    return lambda eager: Eager.apply if eager else op


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
    differentiable functions of ``inputs`` (the autograd Function's tensors, ``xg`` first, then
    the states, ``w_hh`` and the LN parameters) and of ``grads`` (of out and the final states;
    None where not needed).
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


# ---- the cells' backends and entries -----------------------------------------------------------

_BACKENDS = {
    "lstm": Backends(triton="ln_lstm_sequence", native=register_autograd(
        _lstm.ln_lstm_op, _lstm._lstm_body, "ln_lstm", 3, _lstm._loop_with_input_ln,
        _lstm._first_order), reference=_lstm._loop, groups=(4,)),
    "gru": Backends(triton="ln_gru_sequence", native=register_autograd(
        _gru.ln_gru_op, _gru._gru_body, "ln_gru", 2, _gru._loop_with_input_ln,
        _gru._first_order), reference=_gru._loop, groups=(2, 1))}

def _enter(who, gates, xg, states: dict, w_hh, vectors: dict, gain_x, bias_x, lengths,
           batch_sizes, masks: dict):
    """An entry's checks, made once, and its runtime answers (``native.where``, asked once):
    ``gates`` the cell's gate count (W_hh's rows and the input LN's length in multiples of H),
    ``states`` the initial states by name, ``vectors`` the LN parameters by name with their
    lengths (the input LN's added here where given), ``masks`` the regularizers by name.
    -> (where, order, batch_sizes): lengths as ``PackedSequence.batch_sizes`` of the batch sorted
    by decreasing length and that order (None, None without lengths)."""
    where = native.where(xg, *states.values(), w_hh, *(t for t, _ in vectors.values()), gain_x,
                           bias_x, lengths, batch_sizes, *masks.values(), rnn=True)
    H = next(iter(states.values())).shape[-1]
    if gain_x is not None and bias_x is not None:
        vectors = dict(vectors, gain_x=(gain_x, gates * H), bias_x=(bias_x, gates * H))
    T, B, H = common.check_shapes(who, xg, states, w_hh, gates, vectors, where.autocast)
    order = None
    if lengths is not None or batch_sizes is not None:   # the one check (or found recorded)
        order, batch_sizes = _lengths.encode(who, lengths, batch_sizes, T, B)
    common.check_masks(who, xg, T, B, H, **masks)
    return where, order, batch_sizes


# The Triton kernels' second order differentiates each operator's reference loop.
kernels.REFERENCE["lstm"] = functools.partial(reference_grads, _lstm._loop_with_input_ln, 2)
kernels.REFERENCE["gru"] = functools.partial(reference_grads, _gru._loop_with_input_ln, 1)


def ln_lstm_sequence(xg: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, gain_h: Tensor,
                     bias_h: Tensor, gain_c: Tensor, bias_c: Tensor, lengths: Tensor | None = None,
                     eps: float = 1e-5, gain_x: Tensor | None = None, bias_x: Tensor | None = None,
                     *, batch_sizes: Tensor | None = None, h_mask: Tensor | None = None,
                     zone_h: Tensor | None = None, zone_c: Tensor | None = None
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """One layer, one direction of the LN-LSTM (paper, section 3.1) over a whole sequence::

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
        batch_sizes: instead of ``lengths``, for a batch already sorted by decreasing length:
            ``PackedSequence.batch_sizes`` (T,).
        h_mask: (B, H) recurrent dropout (values 0 or 1/(1-p)): the recurrent term reads
            W_h (h_{t-1} * h_mask). zone_h, zone_c: (T, B, H) zoneout (values in [0, 1]): after
            the cell's candidates, h_t = z_h h_{t-1} + (1 - z_h) h~_t and c_t likewise; out[t] is
            the zoned-out h_t. None (the default): off. The masks get no gradient (docs/rnn.md).
    Returns:
        out (T, B, H), h_n (B, H), c_n (B, H): the last two at each example's true length; in
        xg's dtype, or the autocast dtype under ``torch.autocast`` (as torch.nn.LSTM).
    Differentiable to any order in every tensor argument (see the module docstring).
    """
    H = h0.shape[-1]
    masks = dict(h_mask=h_mask, zone_h=zone_h, zone_c=zone_c)
    where, order, batch_sizes = _enter(
        "ln_lstm_sequence", 4, xg, {"h0": h0, "c0": c0}, w_hh,
        {"gain_h": (gain_h, 4 * H), "bias_h": (bias_h, 4 * H), "gain_c": (gain_c, H),
         "bias_c": (bias_c, H)}, gain_x, bias_x, lengths, batch_sizes, masks)
    return run_sequence("ln_lstm_sequence", _BACKENDS["lstm"], where, xg, (h0, c0),
                        (w_hh, gain_h, bias_h, gain_c, bias_c), gain_x, bias_x, masks, order,
                        batch_sizes, eps)


def ln_gru_sequence(xg: Tensor, h0: Tensor, w_hh: Tensor, gain_h: Tensor, bias_h: Tensor,
                    gain_u: Tensor, bias_u: Tensor, lengths: Tensor | None = None,
                    eps: float = 1e-5, gain_x: Tensor | None = None, bias_x: Tensor | None = None,
                    *, batch_sizes: Tensor | None = None, h_mask: Tensor | None = None,
                    zone_h: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One layer, one direction of the LN-GRU (paper, section 3.1) over a whole sequence::

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
            forward and give out[t, b] = 0. batch_sizes: as in ``ln_lstm_sequence``.
        h_mask: (B, H) recurrent dropout: W_h and U read h_{t-1} * h_mask, the update z h_{t-1}
            the unmasked h_{t-1}. zone_h: (T, B, H) zoneout, h_t = z h_{t-1} + (1 - z) h~_t with
            h~_t the GRU's new state. None: off (docs/rnn.md); the masks get no gradient.
    Returns:
        out (T, B, H), h_n (B, H) (at each example's true length), dtype as ``ln_lstm_sequence``.
    """
    H = h0.shape[-1]
    masks = dict(h_mask=h_mask, zone_h=zone_h)
    where, order, batch_sizes = _enter(
        "ln_gru_sequence", 3, xg, {"h0": h0}, w_hh,
        {"gain_h": (gain_h, 2 * H), "bias_h": (bias_h, 2 * H), "gain_u": (gain_u, H),
         "bias_u": (bias_u, H)}, gain_x, bias_x, lengths, batch_sizes, masks)
    return run_sequence("ln_gru_sequence", _BACKENDS["gru"], where, xg, (h0,),
                        (w_hh, gain_h, bias_h, gain_u, bias_u), gain_x, bias_x, masks, order,
                        batch_sizes, eps)
