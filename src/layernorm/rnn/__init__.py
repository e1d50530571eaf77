"""Normalized recurrent networks with torch.nn.LSTM / GRU / RNN's interface (the paper's
section 3.1; docs/rnn.md).

``norm="layer"`` (LN-LSTM / LN-GRU / LN-RNN), ``"batch"`` (Cooijmans et al.'s BN-LSTM baseline,
per-time-step statistics) or ``"none"`` (exactly torch's modules). The equations of every cell
are the step functions and the time loop of ``layernorm.recurrence`` (``lstm_step``,
``gru_step``, ``rnn_step``, ``run_direction`` are importable from here too); the one-step
modules are in ``cells``, the stacked modules in ``modules``.
"""
from .cells import (RNN_NORMS, GRUCell, LSTMCell, RNNCell, RNNInputError, RNNTypeError, gru_step,
                    lstm_step, rnn_step)
from ..checks import RNNArgumentError
from .modules import GRU, LSTM, RNN, run_direction

__all__ = ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "RNN_NORMS", "lstm_step",
           "gru_step", "rnn_step", "run_direction", "RNNInputError", "RNNTypeError",
           "RNNArgumentError"]
