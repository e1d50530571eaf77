"""THE time loop: one layer of a recurrent network in one direction over a sequence, any step
function of ``layernorm.recurrence.steps``."""
from __future__ import annotations

import torch

from .steps import StepFn


def run_direction(step: StepFn, xg: torch.Tensor, state: tuple[torch.Tensor, ...],
                  mask: torch.Tensor | None = None, *, batch_sizes=None,
                  h_mask: torch.Tensor | None = None, zone: tuple | None = None):
    """Run one layer in one direction over time: THE time loop.

    step(xg_t, state, t) -> new state tuple, h_t first; xg: (T, B, G) input terms of every step;
    state: tuple of (B, H); mask: (T, B, 1) bool, True where step t is inside example b's sequence
    (None: all are). Past an example's length its state is copied forward and its output is 0.
    Or, for a batch sorted by decreasing length, ``batch_sizes`` instead of ``mask``: (T,) ints as
    ``PackedSequence.batch_sizes``, step t runs the first ``batch_sizes[t]`` examples only.

    The recurrent regularizers (docs/rnn.md), None = off:

    * ``h_mask`` (B, H): recurrent dropout (Gal & Ghahramani 2016), one mask for the whole
      sequence, values 0 or 1/(1-p); the loop calls ``step(xg_t, state, t, h_mask=...)`` (the
      running rows of the mask) and the step multiplies h_{t-1} by it where it enters the
      recurrent product only (``lstm_step`` / ``gru_step`` / ``rnn_step``).
    * ``zone``: zoneout (Krueger et al. 2016), one (T, B, H) tensor per state tensor (LSTM:
      (zone_h, zone_c); GRU / RNN: (zone_h,)), values in [0, 1]: after the step's candidate
      state s~_t, s_t = z_t s_{t-1} + (1 - z_t) s~_t for each state tensor; the output at step t
      is the zoned-out h_t. Rows past an example's end stay frozen as without it.

    Returns (out (T, B, H), final state), the final state taken at each example's true length.
    """
    B = xg.shape[1]
    outs = []
    for t in range(xg.shape[0]):
        bs = B if batch_sizes is None else int(batch_sizes[t])
        if bs < B:                      # the running examples are a prefix: step them alone
            old = tuple(s[:bs] for s in state)
            if h_mask is None:
                new = step(xg[t, :bs], old, t)
            else:
                new = step(xg[t, :bs], old, t, h_mask=h_mask[:bs])
            if zone is not None:
                new = _zoneout(new, old, zone, t, bs)
            outs.append(torch.cat([new[0], new[0].new_zeros(B - bs, new[0].shape[-1])]))
            state = tuple(torch.cat([n, s[bs:]]) for n, s in zip(new, state))
            continue
        new = step(xg[t], state, t) if h_mask is None else step(xg[t], state, t, h_mask=h_mask)
        if zone is not None:
            new = _zoneout(new, state, zone, t, B)
        if mask is not None:
            m = mask[t]                                                 # (B, 1)
            new = tuple(torch.where(m, n, s) for n, s in zip(new, state))
            outs.append(torch.where(m, new[0], 0.0))
        else:
            outs.append(new[0])
        state = new
    return torch.stack(outs), state


def _zoneout(new: tuple, old: tuple, zone: tuple, t: int, bs: int) -> tuple:
    """Zoneout at step t on the ``bs`` running rows: s_t = z s_{t-1} + (1 - z) s~_t per state
    tensor (``zone[k][t]`` for state k)."""
    if len(zone) != len(new):
        raise ValueError(f"run_direction expected one zoneout tensor per state tensor "
                         f"({len(new)}: h first, then c for the LSTM), received {len(zone)}. "
                         f"Pass zone=(zone_h, zone_c) for an LSTM, (zone_h,) for a GRU / RNN.")
    return zone_update(new, old, tuple(None if z is None else z[t, :bs] if bs < z.shape[1]
                                       else z[t] for z in zone))


def zone_update(new: tuple, old: tuple, zone: tuple) -> tuple:
    """One step of zoneout: s_t = z s_{t-1} + (1 - z) s~_t = s~_t + z (s_{t-1} - s~_t) for each
    state tensor whose z is not None (the loop's rows at step t, or a cell's one step). One op
    where the dtypes agree (under autocast the step's dtype can differ from the state's: then
    promoted)."""
    return tuple(n if z is None else torch.lerp(n, s, z) if n.dtype == s.dtype == z.dtype
                 else n + z * (s - n) for n, s, z in zip(new, old, zone))
