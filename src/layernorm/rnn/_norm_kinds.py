"""What ``norm=`` changes in a recurrent module (docs/rnn.md), decided once when the module is
built: ``NORM_KINDS[norm]`` is a ``NormKind``, and the cells, the stacked modules and
``RecurrentBase`` read its fields instead of comparing the ``norm`` string.

    "layer"  layer norm of every term (the paper's section 3.1); the fused kernels apply
    "batch"  per-step batch norm with running statistics (Cooijmans et al.'s BN-LSTM baseline)
    "none"   no normalization: exactly torch.nn.LSTM / GRU / RNN, computed by torch's own ops
"""
from __future__ import annotations

from dataclasses import dataclass

from .terms import BatchTerm, BiasTerm, LayerTerm, Term


@dataclass(frozen=True)
class NormKind:
    """One value of ``norm=`` and what it means for a module."""
    name: str              # the norm= string, as users pass it and repr shows it
    term: type[Term]       # the normalized term N(a) * gain + bias of every summed input
    gains: bool            # gain Parameters (and the LSTM's bias_c); biases initialised at 0
    running_stats: bool    # running statistics per time step: buffers, num_batches_tracked,
    #                        steps counted, eval reads them; the one-step fast path does not apply
    default_gain: float    # the gains' initial value when gain_init is None
    torch_twin: bool       # torch's own module computes it: torch's ops run, to_torch() and
    #                        torch.jit.script give that module, cuDNN packs the weights
    fused: bool            # the fused whole-sequence operators (LN-LSTM / LN-GRU with biases)


# Cooijmans et al. initialise batch-norm gains at 0.1; the paper's LN gains start at 1.
LAYER = NormKind("layer", LayerTerm, gains=True, running_stats=False, default_gain=1.0,
                 torch_twin=False, fused=True)
BATCH = NormKind("batch", BatchTerm, gains=True, running_stats=True, default_gain=0.1,
                 torch_twin=False, fused=False)
NONE = NormKind("none", BiasTerm, gains=False, running_stats=False, default_gain=1.0,
                torch_twin=True, fused=False)

NORM_KINDS = {kind.name: kind for kind in (LAYER, BATCH, NONE)}
