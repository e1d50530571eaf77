"""Where a call runs: the library's runtime questions, asked in ``where`` and nowhere else.

Which implementation computes a call depends on facts of the moment, not on the module that
makes it: whether the C kernels (``_rnn_steps.c``) are loaded and allowed (``USE_NATIVE``),
whether torch runs eagerly on plain tensors (not compiling, exporting or tracing; no dispatch or
function mode, no tensor subclass), whether a torch.func transform or forward-mode AD is active,
whether autocast is on, whether ``torch.onnx.export`` is capturing the model, and whether the
Triton kernels take the tensors (CUDA). ``where(x, *tensors)`` asks all of them once, at the entry
of an operator, and answers with a ``Where``; the operator then picks its implementation from
those answers and its own dtypes and shapes (its docstring says how). Nothing above the
operators asks: the modules and the cells call an operator and take what it returns.

The operators that ask, once per call: ``sequence.ln_lstm_sequence`` / ``ln_gru_sequence`` (the
LN-LSTM / LN-GRU over a sequence, through their checks ``sequence._enter``;
``sequence.run_sequence`` chooses from their answers),
``sequence.choose_inference`` (their forward without a graph), ``bn.bn_direction`` (the
BN-LSTM / BN-GRU), ``lstm.plain_runs`` (norm="none" on packed input, for ``plain_lstm_direction`` /
``gru.plain_gru_direction``), ``cell.lstm_cell`` / ``gru_cell`` / ``rnn_cell`` / ``torch_cell``
(one step of a cell) and ``gemm.input_linear`` (the input term's GEMM). An operator whose
reference is the module's readable loop (BN, plain, one step) returns None where its kernels do
not run, and the module runs that loop.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .. import kernels
from ..checks import autocast_on
from . import native

_PLAIN = (torch.Tensor, torch.nn.Parameter)


class Where(NamedTuple):
    """The answers for one call (see the module docstring).

    ``lib``: the loaded C kernels where ``USE_NATIVE`` holds and x is on the CPU (any dtype:
    the operator checks its own), else None. ``eager``: eager mode on plain tensors (a C kernel
    may run in place of torch ops, an operator's body may run without the dispatcher).
    ``transformed``: a torch.func transform or forward-mode AD is active (eager).
    ``autocast``: autocast's dtype on x's device, None where it is off. ``onnx``:
    ``torch.onnx.export`` is capturing (the operators have no ONNX translation, so the reference
    runs). ``triton``: the Triton recurrence kernels take x (CUDA; ``kernels.applies_rnn``;
    asked for the LN sequence operators only, ``where(..., rnn=True)``)."""
    lib: object | None
    eager: bool
    transformed: bool
    autocast: torch.dtype | None
    onnx: bool
    triton: bool

    def c(self, *tensors: torch.Tensor, dtypes=(torch.float32,)):
        """The C kernels for an eager call on these tensors (on the CPU, of ``dtypes``) with no
        transform, autocast or ONNX capture, else None."""
        if self.lib is None or not self.eager or self.transformed or self.autocast is not None \
                or self.onnx:
            return None
        for t in tensors:
            if t.dtype not in dtypes or not t.is_cpu:
                return None
        return self.lib


# torch's own questions, looked up once (a cell's step at batch 1 asks them every call)
_compiling, _tracing = torch.compiler.is_compiling, torch._C._is_tracing
_dispatch_modes, _function_modes = (torch._C._len_torch_dispatch_stack,
                                    torch._C._is_torch_function_mode_enabled)
_functorch = torch._C._functorch.peek_interpreter_stack
_autocast_enabled = torch.is_autocast_enabled


def where(x: torch.Tensor, *tensors: torch.Tensor | None, rnn: bool = False) -> Where:
    """Ask the runtime questions for a call on ``x`` and ``tensors`` (entries that are not
    tensors, such as None, ignored); ``rnn``: a call the Triton recurrence kernels can run (the
    LN sequence operators; the others have none: ``triton`` False without asking)."""
    compiling = _compiling()
    onnx = compiling and torch.compiler.is_exporting() and torch.onnx.is_in_onnx_export()
    eager = not (compiling or _tracing() or _dispatch_modes() or _function_modes()) \
        and type(x) in _PLAIN
    if eager:
        for t in tensors:
            if type(t) not in _PLAIN and isinstance(t, torch.Tensor):   # a tensor subclass
                eager = False
                break
    transformed = not compiling and (_functorch() is not None or getattr(
        torch.autograd.forward_ad, "_current_level", -1) >= 0)
    if x.is_cpu:
        lib = native.load() if native.USE_NATIVE else None
        autocast = torch.get_autocast_dtype("cpu") if _autocast_enabled("cpu") else None
        triton = rnn and kernels._INTERPRET_CPU and kernels.applies_rnn(x)  # (tests: Triton
        #   interpreted over CPU tensors)
    else:
        lib = None
        autocast = torch.get_autocast_dtype(x.device.type) if autocast_on(x) else None
        triton = rnn and kernels.applies_rnn(x)
    return Where(lib, eager, transformed, autocast, onnx, triton)
