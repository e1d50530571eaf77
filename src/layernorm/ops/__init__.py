"""Every fast path of the normalized recurrent cells behind one entry per cell (docs/rnnfast.md).

``ln_lstm`` / ``ln_gru``: one layer and one direction of the LN-LSTM / LN-GRU (paper, section
3.1) over a whole sequence; each checks its arguments, then ``sequence.run_sequence`` picks
once, among the cell's ``sequence.Backends``, the Triton step kernels (CUDA,
``layernorm.kernels``), the C kernels (CPU float32, ``_rnn_steps.c``) or the reference loop
under autograd (``layernorm.recurrence``).
``bn_applies`` / ``bn_direction``: the BN-LSTM / BN-GRU baseline's C time loop (CPU float32).
``ln_lstm_step`` / ``ln_gru_step`` and ``cell_lib``: the cells' one step in one C call.

Files, read downward (each call goes one way): ``lstm`` / ``gru`` (each LN cell's entry and
checks) -> ``sequence`` (the one choice of path, the operators' autograd) -> ``lstm_backend`` /
``gru_backend`` (each cell's C calls, operators and reference loop) -> ``common`` (shared checks,
dtypes, input LN, the kernels' look-up and backward ranges); ``bn`` (the BN cells), ``cell``
(the one-step C path), ``pool`` (the buffer pool), ``gemm`` (packed weights and the input GEMM),
``native`` (loading the C kernels, their structs, one call).
The readable reference they are tested against is ``layernorm.recurrence``.
"""
from .bn import PARAMS as BN_PARAMS, applies as bn_applies, bn_direction
from .gemm import input_linear
from .pool import release_workspace
from .cell import gru_step as ln_gru_step, lib_for as cell_lib, lstm_step as ln_lstm_step
from .gru import ln_gru_sequence
from .lstm import ln_lstm_sequence

ln_lstm, ln_gru = ln_lstm_sequence, ln_gru_sequence

__all__ = ["ln_lstm", "ln_gru", "bn_applies", "bn_direction", "BN_PARAMS", "ln_lstm_step", "ln_gru_step",
           "cell_lib", "input_linear", "release_workspace", "ln_lstm_sequence", "ln_gru_sequence"]
