"""ONNX export through torch's default exporter (``torch.onnx.export(model, args)``, which
captures the model with torch.export and then translates each operator of the graph to ONNX).

The fused LN-LSTM / LN-GRU recurrences are registered operators (``torch.ops.layernorm.ln_lstm``
/ ``ln_gru``, docs/rnnfast.md) with no ONNX translation. While that exporter captures the model,
the stacked modules run the same equations as the readable loop of torch ops instead (the path of
``use_fused = False``), which it translates op by op. Everything else (torch.compile, a plain
torch.export) keeps seeing the one registered operator. The ONNX graph is the loop unrolled for
the example's sequence length, as the legacy exporter's trace is.
"""
from __future__ import annotations

import torch


def exporting_to_onnx() -> bool:
    """Whether ``torch.onnx.export`` is capturing the model with torch.export (its default,
    ``dynamo=True``); the legacy exporter traces, which takes the loop already."""
    return torch.compiler.is_exporting() and torch.onnx.is_in_onnx_export()
