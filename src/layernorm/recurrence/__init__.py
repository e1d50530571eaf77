"""THE reference equations of every recurrent cell of the package (the paper's section 3.1;
docs/rnn.md): the source of truth that every other implementation is written from and tested
against.

    ``steps``   one time step of the LSTM, GRU and Elman RNN, pure torch functions: the readable
                steps with the normalization passed in (``lstm_step``, ``gru_step``,
                ``rnn_step``: layer norm, batch norm or none), the layer-normalized steps written
                straight onto torch's kernels (``ln_lstm_step``, ``ln_gru_step``,
                ``ln_rnn_step``) and, shared by both, each cell's gate equations
                (``lstm_gates``, ``gru_gates``)
    ``loop``    THE time loop (``run_direction``): one layer in one direction over a sequence
    ``lengths`` THE length encoding of a variable-length batch (``batch_sizes``, as
                ``PackedSequence.batch_sizes``) and its one check, from the modules down to the
                kernels

Every other form computes these functions and is tested against them: the C kernels of
``layernorm.ops`` (``_rnn_steps.c``: the cells' one-step call and the whole-sequence loop, with
their hand-derived backward) and the Triton kernels of ``layernorm.kernels`` (CUDA). Where no
kernel runs, and for second derivatives and torch.func transforms, the operators run or
differentiate the steps here in the loop here.

This package imports torch only: it sits below every other part of ``layernorm``.
"""
from .loop import run_direction, zone_update
from .steps import (NONLINEARITIES, StepFn, gru_affine_parts, gru_from_terms, gru_gates,
                    gru_step, ln_gru_step, ln_gru_step_parts, ln_lstm_step, ln_rnn_step,
                    lstm_from_terms, lstm_gates, lstm_step, rnn_step)

__all__ = ["run_direction", "zone_update",
           "NONLINEARITIES", "StepFn", "lstm_step", "gru_step", "rnn_step",
           "lstm_gates", "gru_gates", "ln_lstm_step", "lstm_from_terms", "ln_gru_step",
           "ln_gru_step_parts", "gru_from_terms", "gru_affine_parts", "ln_rnn_step"]
