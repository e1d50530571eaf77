"""The frame of the LN-LSTM and LN-GRU operators (``lstm``, ``gru``): THE choice of path of a
whole-sequence call, made once (``run_sequence``, among a cell's ``Backends``: the Triton kernels,
the registered operator on the C kernels, the reference loop under autograd; and before it, for
a module's layer from its raw input, whether the inference kernels run with no graph:
``ln_inference``, ``choose_inference``), and the operators' autograd (``register_autograd``:
first order through the cell's backward operator, second order by differentiating its reference
loop; ``reference_grads``, the Triton kernels' second order).

Read downward: the entries (``lstm``, ``gru``) call this frame; it calls each cell's backend
(``lstm_backend``, ``gru_backend``: the C calls, the operators' bodies, the reference loop) and
the shared helpers (``common``), which call nothing above them.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from .. import kernels
from .._autograd import differentiable_backward
from ..functional import stats_dtype
from . import dispatch, inference
from .common import dtypes, input_ln, prepare_masks
from .pool import cast


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


def run_sequence(who, cell: Backends, where: dispatch.Where, xg, states, params, gain_x, bias_x,
                 masks: dict, order, batch_sizes, eps):
    """``ln_*_sequence`` after its checks (``masks``: the checked regularizers by name, None where
    off; ``where``: the call's runtime answers, asked once by the entry): THE choice of path,
    made once here. The Triton kernels where they take xg (CUDA; not under torch.func transforms
    or forward-mode AD); the registered operator on
    the C kernels where they load and the compute dtype is float32 on the CPU (its body
    directly, with the same autograd, in eager mode on plain tensors); elsewhere (float64, no
    C compiler, ``USE_NATIVE = False``, CUDA without Triton, torch.func transforms and
    forward-mode AD, a ``torch.onnx.export`` capture) the cell's reference loop under ordinary
    autograd. -> (out, *final states) in the batch's order and in the output dtype."""
    if where.triton and not where.transformed:  # (their autograd.Function carries no tangent
        return kernels.sequence(cell.triton, xg, states, params, order, batch_sizes, eps,
                                gain_x, bias_x, masks)        # and has no functorch rule)
    compute, out_dtype = dtypes(xg, where.autocast)
    # (on plain tensors in eager mode a tensor of the dtype already is taken as it is: what its
    # ``.to`` returns, without the ~2 us of the call, a dozen times a call)
    to = _to if where.eager else torch.Tensor.to
    masks = prepare_masks(masks.values(), compute, order)
    states = [to(t, compute) for t in states]  # xg below: in a pooled buffer where eager
    params = tuple(to(t, compute) for t in params)
    gain_x, bias_x = (None if t is None else to(t, compute) for t in (gain_x, bias_x))
    groups, n = tuple(k * states[0].shape[-1] for k in cell.groups), len(states)
    if where.lib is None or compute != torch.float32 or where.transformed or where.onnx:
        xg, _, _ = input_ln(who, xg.to(compute), gain_x, bias_x, groups, eps, inside=False)

        def run(xg_, *states_):
            return cell.reference(xg_, *states_, *params, batch_sizes, eps, *masks)
    else:
        input_ln(who, xg, gain_x, bias_x, groups, eps, inside=True)  # checks the pair
        tensors = (xg, *states, *params, gain_x, bias_x)
        save = torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                for t in tensors)
        xg = cast(xg, compute) if where.eager else xg.to(compute)
        operator = cell.native(where.eager)

        def run(xg_, *states_):
            return operator(xg_, *states_, *params, gain_x, bias_x, *masks, batch_sizes,
                            float(eps), save, out_dtype == torch.bfloat16)[:n + 1]
    outs = with_order(run, order, xg, tuple(states))
    return tuple(to(o, out_dtype) for o in outs)


# ---- without a graph: the inference kernels (``inference``)

def choose_inference(x: torch.Tensor, *tensors: torch.Tensor) -> torch.dtype | None:
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


def _to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)`` for a plain tensor: t itself where it has the dtype already."""
    return t if t.dtype == dtype else t.to(dtype)


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
