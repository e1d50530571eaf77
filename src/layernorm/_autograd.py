"""The one helper every custom backward uses for second order: a backward written as the gradient of
a differentiable function (the reference), so autograd can differentiate it again. Imports
nothing of the library, so the ops and the Triton kernels both use it."""
from __future__ import annotations

import torch


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
