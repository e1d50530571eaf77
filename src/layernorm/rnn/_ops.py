"""What the LN-LSTM and LN-GRU operators (``_lstm``, ``_gru``) share around their own math: the
choice of path inside the forward operator, the backward operator's dispatch on the path the
forward took, the fake tensors of the saved buffers, and the autograd registration (first order
through the backward operator, second order by differentiating the differentiable loop).

Each cell passes what is its own: its forward / backward on each path, its differentiable loop,
and how its first-order backward calls its backward operator.

In eager mode on plain CPU float32 tensors (``eager``) a call skips torch's dispatcher and runs
the operator's body under a ``torch.autograd.Function`` with the same autograd (measured ~0.12 ms
a forward and ~0.17 ms a backward call of dispatch and argument handling, at any size); under
torch.compile / torch.export the registered operators run, one opaque op each.
"""
import torch

from . import _driver
from . import _sequence as seq
from ._workspace import _WORKSPACE

TORCH_OPS, NATIVE = 0, 1  # the path a forward took, returned by the operator


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def eager_mode(*tensors) -> bool:
    """Eager mode (not compiling, exporting or tracing; no dispatch or function mode, so no fake
    tensors) on plain tensors (no subclass): where a C kernel may run in place of torch ops."""
    if (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()):
        return False
    return all(type(t) in _PLAIN for t in tensors)


def eager(*args) -> bool:
    """Whether an operator call may run its body directly: ``eager_mode`` and the C kernels
    apply to the first tensor (CPU float32). Else the registered operator runs."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return eager_mode(*tensors) and _driver.native_lib(tensors[0]) is not None


def call(op, body, *args):
    """``op(*args)``, or its ``body(*args)`` where ``eager`` holds (a backward operator: no
    autograd of its own at first order)."""
    return body(*args) if eager(*args) else op(*args)


def contig(v):
    """``v`` detached and contiguous (None stays None): an argument for the C kernels."""
    return None if v is None else v.detach().contiguous()


def forward(forward_native, forward_ops, n_buffers, xw, *rest):
    """Run one path of a forward operator -> (*states, *saved, path). ``forward_*`` return
    (*states, saved or None); without ``save`` the saved buffers are empty (``n_buffers`` of xw's
    dtype and the statistics)."""
    lib = _driver.native_lib(xw)
    args = (xw.contiguous(), *rest)
    with torch.autocast(xw.device.type, enabled=False):
        *states, saved = (forward_native(lib, *args) if lib is not None else forward_ops(*args))
    if saved is None:
        saved = [xw.new_empty(0) for _ in range(n_buffers)]
        saved.append(xw.new_empty(0, dtype=seq.stats_dtype(xw.dtype)))
    path = torch.tensor([NATIVE if lib is not None else TORCH_OPS], dtype=torch.int8)
    return (*states, *saved, path)


def backward(who, path, xw, backward_native, backward_ops, args):
    """Run a backward operator on the path its forward took (``path``, as the forward returned)."""
    with torch.autocast(xw.device.type, enabled=False):
        if int(path[0]) == NATIVE:
            lib = _driver.native_lib(xw)
            if lib is None:
                raise RuntimeError(f"{who}: the forward ran the C kernels, which are no longer "
                                   "available in this process; run the forward again.")
            return backward_native(lib, *args)
        return backward_ops(*args)


# The backward kernels run over the sequence in ranges of at most this many bytes of ``dhg`` (the
# gradient of W_hh h_{t-1}) and a quarter of the steps, each range followed by its share of dW_hh
# as one GEMM: dhg is then held for one range, not for all T steps (a (T, B, G) buffer, as large
# as xw).
CHUNK_BYTES = 2 << 20


def native_backward(lib, kernel, cls, who, h0, out, batch_sizes, G, **fields):
    """Run the backward C ``kernel`` latest steps first, one range of steps per call, and
    accumulate dW_hh = sum_t dhg_t^T h_{t-1} (h_{t-1}: h0 at t = 0, else out[t - 1]) -> dW_hh
    (G, H). ``fields``: the rest of the kernel's arguments, as ``_driver.call``."""
    T, B, H = out.shape
    steps = max(1, min(-(-T // 4), CHUNK_BYTES // max(1, 4 * B * G)))  # >= 4 ranges
    buf = _WORKSPACE.get((steps, B, G), like=out)
    dw = out.new_zeros(G, H)
    sizes = _driver.int32(batch_sizes)
    for hi in range(T, 0, -steps):
        lo = max(0, hi - steps)
        dhg = buf[:hi - lo]
        if batch_sizes is not None:  # the kernel writes only the rows that run
            dhg.zero_()
        _driver.call(lib, kernel, cls, who, t0=lo, t1=hi, h0=h0, out=out,
                     batch_sizes=sizes, dhg=dhg, **fields)
        flat = dhg.view(-1, G)
        if lo:
            dw.addmm_(flat.t(), out[lo - 1:hi - 1].reshape(-1, H))
        else:
            dw.addmm_(flat[B:].t(), out[:hi - 1].reshape(-1, H)).addmm_(flat[:B].t(), h0)
    return dw


def fake_saved(xw, save):
    """For a fake forward: ``new(*shape, dtype=)`` gives a saved buffer of that shape (empty
    without ``save``); ``new_stats(*shape)`` the statistics."""
    def new(*shape, dtype=xw.dtype):
        return xw.new_empty(shape if save else (0,), dtype=dtype)

    def new_stats(*shape):
        return new(*shape, dtype=seq.stats_dtype(xw.dtype))
    return new, new_stats


def register_autograd(op, body, name, n_states, loop, first_order):
    """Register the autograd of ``op`` (inputs: ``*tensors, batch_sizes, eps, save``; outputs:
    out (T, B, H), ``n_states - 1`` final states, the saved buffers and the path) -> a function
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
        return Eager.apply(*inputs) if eager(*inputs) else op(*inputs)
    return run


def _second_order(ctx, inputs, batch_sizes, grads, loop):
    """The backward as a differentiable function of the inputs and of the output gradients:
    re-run the forward as ``loop`` and differentiate it with ``create_graph=True``."""
    return differentiable_backward(lambda *xs: loop(*xs, batch_sizes, ctx.eps), inputs,
                                   ctx.needs_input_grad, grads)


def differentiable_backward(fn, inputs, needs_input_grad, grads):
    """The gradients of ``fn(*inputs)`` (a tuple of outputs) with output gradients ``grads`` (None:
    not needed), as differentiable functions of the inputs and of ``grads``: what a custom
    backward returns under ``create_graph=True``. Each input enters ``fn`` as a fresh alias, so
    its gradient is the partial derivative through this call only: an input computed from another
    (h0 from the weights, by an earlier call) does not add the earlier call's path twice.
    -> one gradient or None per entry of ``needs_input_grad``."""
    need = [i for i, t in enumerate(inputs) if t is not None and needs_input_grad[i]]
    with torch.enable_grad():
        aliases = [t if t is None or not needs_input_grad[i] else t.view_as(t)
                   for i, t in enumerate(inputs)]
        outs = fn(*aliases)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
        found = torch.autograd.grad([o for o, _ in pairs], [aliases[i] for i in need],
                                    [g for _, g in pairs], create_graph=True, allow_unused=True)
    result = [None] * len(needs_input_grad)
    for i, g in zip(need, found):
        result[i] = g
    return result
