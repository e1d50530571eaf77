"""The LN-LSTM and LN-GRU recurrence on CUDA: per step one cuBLAS GEMM and ONE Triton kernel.

The equations (docs/rnn.md), arguments, gate order and results of
``layernorm.rnn.fused.ln_lstm_sequence`` / ``ln_gru_sequence``. Forward, step t::

    hg = h_{t-1} @ W_hh^T                                  torch.mm (cuBLAS)          (B, G)
    kernel: LN(hg) (+ LN of the raw input term when gain_x is given), gates, cell, LN(c),
            h_t; the state of an example past its length is copied forward, its output is 0

Backward, step t (from T - 1 down)::

    kernel: recomputes the step's activations from the saved hg, input term, cell states and
            statistics; d(gates), d(hg) through the LN, d(input term) (through the input LN),
            the state gradients, and adds the LN gain/bias gradients of its row to a float32
            (B, n_params) accumulator (each program owns its row: no atomics)
    dh_{t-1} += d(hg) @ W_hh                              torch.mm
    after the loop: dW_hh = ONE GEMM over all steps; LN parameter grads = accumulator.sum(0)

One program per example; the gate vectors are H-wide blocks of the next power of two, masked.
Activations and statistics in float32; h (the GEMM's input) in the input dtype, the LSTM's raw
cell state kept in float32 across steps.
"""
from __future__ import annotations

from ._rnn_common import _block  # noqa: F401  (launch sizes, read by the compile check)
from ._rnn_gru import _gru_backward_step, _gru_forward_step, ln_gru_sequence  # noqa: F401
from ._rnn_lstm import _lstm_backward_step, _lstm_forward_step, ln_lstm_sequence  # noqa: F401

# Files: ``_rnn_common`` (the @triton.jit LN helpers and host-side checks both cells share),
# ``_rnn_lstm`` and ``_rnn_gru`` (each cell's step kernels, host loop and autograd Function).
__all__ = ["ln_lstm_sequence", "ln_gru_sequence"]
