"""Step functions (one time step of an LSTM / GRU / RNN, pure) and THE time loop that runs one
layer in one direction over a sequence (``run_direction``); equations in ``layernorm.rnn.cells``
and docs/rnn.md."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu}

StepFn = Callable[[torch.Tensor, tuple, int], tuple]


def lstm_step(xg: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_hh: torch.Tensor,
              norm_hh: Callable, norm_c: Callable, t: int | None = None,
              w_hr: torch.Tensor | None = None):
    """One (LN-/BN-)LSTM step. xg: (B, 4H) = N(W_x x_t) + b_ih; h: (B, P); c: (B, H);
    w_hh: (4H, P); w_hr: (P, H) projection (torch's proj_size) or None (then P = H).

    Returns (h_t, c_t); c_t is the raw cell, only its normalized copy enters h_t.
    """
    gates = xg + norm_hh(F.linear(h, w_hh), t)                    # (B, 4H)
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    c = torch.sigmoid(forgetgate) * c + torch.sigmoid(ingate) * torch.tanh(cellgate)
    h = torch.sigmoid(outgate) * torch.tanh(norm_c(c, t))
    if w_hr is not None:
        h = F.linear(h, w_hr)                                     # (B, P)
    return h, c


def gru_step(xg: torch.Tensor, h: torch.Tensor, w_hh: torch.Tensor, norm_hh: Callable,
             t: int | None = None):
    """One (LN-)GRU step. xg: (B, 3H) = [N(W_x x_t) + b over r, z | N(W x_t) + b_in]; h: (B, H).

    The recurrent term is [N(W_h h) + b over r, z | N(U h) + b_hn]: U h is normalized before the
    reset gate multiplies it (the LN-GRU of docs/rnn.md). Returns (h_t,).
    """
    hg = norm_hh(F.linear(h, w_hh), t)                            # (B, 3H)
    H2 = 2 * h.shape[-1]
    resetgate, updategate = torch.sigmoid(xg[:, :H2] + hg[:, :H2]).chunk(2, 1)
    newgate = torch.tanh(xg[:, H2:] + resetgate * hg[:, H2:])
    return (newgate + updategate * (h - newgate),)                # (1 - z) * n + z * h


def rnn_step(xw: torch.Tensor, h: torch.Tensor, w_hh: torch.Tensor, norm_a: Callable,
             nonlinearity: Callable = torch.tanh, t: int | None = None):
    """One (LN-)RNN step, eq. 4: h_t = f(N(W_x x_t + W_h h_{t-1}) + b). xw: (B, H) = W_x x_t."""
    return (nonlinearity(norm_a(xw + F.linear(h, w_hh), t)),)


def run_direction(step: StepFn, xg: torch.Tensor, state: tuple[torch.Tensor, ...],
                  mask: torch.Tensor | None = None):
    """Run one layer in one direction over time: THE time loop.

    step(xg_t, state, t) -> new state tuple, h_t first; xg: (T, B, G) input terms of every step;
    state: tuple of (B, H); mask: (T, B, 1) bool, True where step t is inside example b's sequence
    (None: all are). Past an example's length its state is copied forward and its output is 0.
    Returns (out (T, B, H), final state), the final state taken at each example's true length.
    """
    outs = []
    for t in range(xg.shape[0]):
        new = step(xg[t], state, t)
        if mask is not None:
            m = mask[t]                                                 # (B, 1)
            new = tuple(torch.where(m, n, s) for n, s in zip(new, state))
            outs.append(torch.where(m, new[0], 0.0))
        else:
            outs.append(new[0])
        state = new
    return torch.stack(outs), state
