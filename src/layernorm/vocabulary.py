"""The project's one table of normalization methods: each name, how it is printed, and where it
applies. Everything that names a norm reads it from here: ``make_norm`` and ``norm_block``, the
analysis (``analysis.layer.METHODS``), the report's labels and the CLI's ``--norm`` choices.

    name     label              feed-forward  conv  RNN   the LSTM it gives (paper section 6)
    layer    layer norm         yes           yes   yes   LN-LSTM
    batch    batch norm         yes           yes   yes   BN-LSTM (Cooijmans et al. 2016)
    rms      RMS norm           yes           no    no    -
    weight   weight norm        yes           yes   no    -
    none     no normalization   yes           yes   yes   LSTM

"rms" normalizes the trailing features of (..., features) inputs, so it has no conv form; "weight"
re-parameterizes a layer's weight matrix and is not offered for the recurrent cells. The RNN column
is the list of norms the recurrent cells accept (``layernorm.rnn.RNN_NORMS``; a test keeps the two
equal). This module imports nothing, so every layer of the package may read it; it is public, and
the paper's reproduction reads the names of the norms from here.
"""
from __future__ import annotations

from typing import NamedTuple


class Norm(NamedTuple):
    name: str              # the string passed as ``norm=`` / ``--norm``
    label: str             # how reports, figures and tables print it
    feedforward: bool      # make_norm(name, H) for (N, H) summed inputs
    conv: bool             # make_norm(name, C, conv=True) for (N, C, H, W) feature maps
    rnn_model: str | None  # the LSTM with this norm in the recurrent cells, None if not offered


TABLE: tuple[Norm, ...] = (
    Norm("layer", "layer norm", True, True, "LN-LSTM"),
    Norm("batch", "batch norm", True, True, "BN-LSTM"),
    Norm("rms", "RMS norm", True, False, None),
    Norm("weight", "weight norm", True, True, None),
    Norm("none", "no normalization", True, True, "LSTM"),
)

BY_NAME: dict[str, Norm] = {n.name: n for n in TABLE}
NORMS: tuple[str, ...] = tuple(n.name for n in TABLE)
LABELS: dict[str, str] = {n.name: n.label for n in TABLE}
FEEDFORWARD_NORMS: tuple[str, ...] = tuple(n.name for n in TABLE if n.feedforward)
CONV_NORMS: tuple[str, ...] = tuple(n.name for n in TABLE if n.conv)
RNN_NORMS: tuple[str, ...] = tuple(n.name for n in TABLE if n.rnn_model is not None)
RNN_MODELS: dict[str, str] = {n.name: n.rnn_model for n in TABLE if n.rnn_model is not None}
