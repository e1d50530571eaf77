"""Every fast path of the normalized recurrent cells behind one entry per cell (docs/rnnfast.md).

``ln_lstm`` / ``ln_gru``: one layer and one direction of the LN-LSTM / LN-GRU (paper, section
3.1) over a whole sequence; each checks its arguments, then ``sequence.run_sequence`` picks
once, among the cell's ``sequence.Backends``, the Triton step kernels (CUDA,
``layernorm.kernels``), the C kernels (CPU float32, ``_rnn_steps.c``) or the reference loop
under autograd (``layernorm.recurrence``).
``bn_direction``: the BN-LSTM / BN-GRU baseline's C time loop (CPU float32), or None where it
does not run. ``lstm_cell`` / ``gru_cell`` / ``rnn_cell`` / ``torch_cell``: one step of a cell
(``ln_lstm_step`` / ``ln_gru_step``: the C step in one call). ``plain_lstm_direction`` /
``plain_gru_direction``: norm="none" in the C time loop, or None where it does not run
(``plain_runs``: whether it does, which a stack asks before laying out a packed batch).
Each entry asks the runtime questions once (``native.where``) and chooses its path there.

Files, read downward (each call goes one way): ``sequence`` (the LN cells' entries and checks,
the one choice of path, the operators' autograd; and ``ln_inference``, a module layer's forward
without a graph, which calls ``inference``, the kernels with W_x x_t inside the loop) -> ``lstm``
/ ``gru`` (each cell's backends: C calls, operators and reference loop; and its plain form,
norm="none") -> ``common`` (shared checks, dtypes, input LN, the buffer pool, the kernels'
backward ranges); ``bn`` (the BN cells), ``cell`` (the one-step C path), ``gemm`` (packed weights
and the input GEMM), ``native`` (the runtime questions every entry asks, ``where``; loading the C
kernels, their structs, one call).
The readable reference they are tested against is ``layernorm.recurrence``.
"""
from .bn import PARAMS as BN_PARAMS, bn_direction
from .gemm import input_linear
from .common import release_workspace
from .cell import (gru_cell, gru_step as ln_gru_step, lstm_cell, lstm_step as ln_lstm_step,
                   rnn_cell, torch_cell)
from .gru import plain_gru_direction
from .lstm import plain_lstm_direction, plain_runs
from .sequence import ln_gru_sequence, ln_lstm_sequence
from .sequence import INFERENCE_PARAMS, ln_inference

ln_lstm, ln_gru = ln_lstm_sequence, ln_gru_sequence

__all__ = ["ln_lstm", "ln_gru", "bn_direction", "BN_PARAMS", "ln_lstm_step", "ln_gru_step",
           "lstm_cell", "gru_cell", "rnn_cell", "torch_cell", "plain_lstm_direction",
           "plain_gru_direction", "plain_runs", "ln_inference", "INFERENCE_PARAMS", "input_linear",
           "release_workspace", "ln_lstm_sequence", "ln_gru_sequence"]
