"""The step functions and the time loop, under the name docs/rnn.md gave them before they moved
to ``layernorm.recurrence`` (the reference equations): the same objects, for code that imports
``layernorm.rnn.steps``."""
from ..recurrence import (NONLINEARITIES, StepFn, gru_step, lstm_step,  # noqa: F401
                          rnn_step, run_direction)
