"""THE time loop: one layer of a recurrent network in one direction over a sequence, any step
function of ``layernorm.recurrence.steps``."""
from __future__ import annotations

import torch

from .steps import StepFn


def run_direction(step: StepFn, xg: torch.Tensor, state: tuple[torch.Tensor, ...],
                  mask: torch.Tensor | None = None, *, batch_sizes=None):
    """Run one layer in one direction over time: THE time loop.

    step(xg_t, state, t) -> new state tuple, h_t first; xg: (T, B, G) input terms of every step;
    state: tuple of (B, H); mask: (T, B, 1) bool, True where step t is inside example b's sequence
    (None: all are). Past an example's length its state is copied forward and its output is 0.
    Or, for a batch sorted by decreasing length, ``batch_sizes`` instead of ``mask``: (T,) ints as
    ``PackedSequence.batch_sizes``, step t runs the first ``batch_sizes[t]`` examples only.
    Returns (out (T, B, H), final state), the final state taken at each example's true length.
    """
    B = xg.shape[1]
    outs = []
    for t in range(xg.shape[0]):
        bs = B if batch_sizes is None else int(batch_sizes[t])
        if bs < B:                      # the running examples are a prefix: step them alone
            new = step(xg[t, :bs], tuple(s[:bs] for s in state), t)
            outs.append(torch.cat([new[0], new[0].new_zeros(B - bs, new[0].shape[-1])]))
            state = tuple(torch.cat([n, s[bs:]]) for n, s in zip(new, state))
            continue
        new = step(xg[t], state, t)
        if mask is not None:
            m = mask[t]                                                 # (B, 1)
            new = tuple(torch.where(m, n, s) for n, s in zip(new, state))
            outs.append(torch.where(m, new[0], 0.0))
        else:
            outs.append(new[0])
        state = new
    return torch.stack(outs), state
