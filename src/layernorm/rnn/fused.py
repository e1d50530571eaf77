"""Fused whole-sequence LN-LSTM and LN-GRU recurrences with a hand-derived backward (C kernels).

The readable LN-LSTM/LN-GRU (``layernorm.rnn``) runs one autograd graph per time step: at the sizes
people train (B = 32, H = 256) the time goes to per-op Python/autograd overhead, not to arithmetic.
Here one operator covers the whole sequence of one layer and one direction
(``torch.ops.layernorm.ln_lstm`` / ``ln_gru``, registered with ``torch.library``: torch.compile
and torch.export see one opaque op, with a shape function for any sequence length):

* the forward loop runs without autograd and keeps only what the backward needs;
* the backward operator computes the gradients of every step by hand and leaves everything that
  does not feed the recurrence to after the loop: the weight gradient ``dW_hh`` is ONE GEMM over
  all steps, the LN gains/biases gradients are accumulated on the way;
* the gradient of the input term comes back as one (T, B, G) tensor, so ``W_x`` backpropagates
  through ordinary autograd;
* second derivatives (``create_graph=True``: gradient penalties, MAML) re-run the sequence as a
  differentiable loop of torch ops and differentiate it, so they are exact; torch.func transforms
  (grad, jacrev, vmap) run that loop directly.

On the CPU in float32 the forward loop runs in ONE call of a small C kernel (``_rnn_steps.c``:
its own register-tiled recurrent GEMM, the input LN folded into the step, examples split over
threads for the whole sequence), the backward loop in one call per range of steps (each range
followed by its share of ``dW_hh``, so the gradient of ``W_hh h_{t-1}`` is held for one range
only), with their sequence buffers reused across calls (``layernorm.ops.common``). The
operators write the outputs (T, B, H) directly (h0 passed apart), and the LN-GRU saves
``W_hh h_{t-1}`` and the LN statistics only, recomputing its gates in the backward: a training
step's peak memory is about torch.nn.LSTM's / GRU's. Half types (and autocast) on the CPU are
converted to float32 once per call, so they run the same kernels with float32 statistics and
accumulation; the result is in the half type, as torch.nn.LSTM's. Their input GEMM
(``input_linear``) runs in float32 on CPUs without native half GEMMs (torch emulates those ~9x
slower). On CUDA the Triton kernels run (``layernorm.kernels``). Elsewhere (float64, no C
compiler, ``USE_NATIVE = False``, CUDA without Triton) the reference loop of torch ops runs under
ordinary autograd (docs/rnnfast.md, "Where the C kernels do not run").

Variable-length batches run like cuDNN packed sequences: examples are ordered by decreasing length
and step t only touches the ``batch_sizes[t]`` examples still running, so padding costs nothing.

This module is the public face of those operators; they live in ``layernorm.ops`` (files
there: ``sequence`` the cells' entry points, the one choice of path among a cell's backends and
the operators' autograd, ``lstm`` / ``gru`` each cell's C path, operators and reference loop,
``common`` what they share (the buffer pool included), ``gemm`` the GEMMs, ``native`` where a
call runs, loading and calling the C kernels).
Equations (paper, section 3.1) and gate order: see ``ln_lstm_sequence`` and
``ln_gru_sequence``; the reference they are tested against is ``layernorm.recurrence``.
"""
from __future__ import annotations

import sys
import types

from ..ops import native as _native
from ..ops.gemm import input_linear
from ..ops.common import release_workspace
from ..ops.sequence import ln_gru_sequence, ln_lstm_sequence

__all__ = ["ln_lstm_sequence", "ln_gru_sequence", "input_linear", "release_workspace",
           "USE_NATIVE"]


class _FusedModule(types.ModuleType):
    """This module, with ``USE_NATIVE``: set it to False to force the torch-ops path everywhere
    (tests run both paths); it is the C kernels' switch, kept by ``layernorm.ops.native``."""

    @property
    def USE_NATIVE(self) -> bool:
        return _native.USE_NATIVE

    @USE_NATIVE.setter
    def USE_NATIVE(self, value: bool) -> None:
        _native.USE_NATIVE = bool(value)


sys.modules[__name__].__class__ = _FusedModule
