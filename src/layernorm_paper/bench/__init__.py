"""``layernorm bench``: speed against torch, every ratio measured in the same run (docs/norms.md,
docs/rnnfast.md). Never used by tests to assert a speed.

    harness    the comparison harness: medians of interleaved rounds, ratios to an anchor, the
               line saying where a table was measured (``compare``, ``ratios``, ``machine``)
    norms      ``bench norms``: LayerNorm / BatchNorm / RMSNorm forward+backward vs torch's
    rnn        ``bench rnn``: LN-LSTM / LN-GRU sequences vs torch.nn.LSTM / GRU
    cells      ``bench rnn``'s step tables: the cells at batch 1 and 32, BN-LSTM vs LN-LSTM
    decode     ``bench rnn``'s decode table: a stack called one step at a time
    regularizers  ``bench rnn --tables regularizers``: LN-LSTM / LN-GRU with each
                  recurrent regularizer vs without
    memory     peak memory of one call
    growth     ``bench growth``: |dL/dW_hh| against the sequence length (docs/rnn.md)
    baseline   the TorchScript LN-LSTM that ``bench rnn`` times beside torch's and ours

Tables are printed with ``layernorm_paper._io.format_table`` (re-exported here).
"""
from __future__ import annotations

from .._io import format_table
from .cells import bench_bn_lstm, bench_cells
from .growth import GROWTH_MODELS, gradient_growth
from .growth import add_command as add_growth_command
from .harness import CLOCKS, compare, machine, ratios
from .norms import NORM_KINDS, NORM_SHAPES, STAT_SHAPES, bench_norms
from .norms import add_command as add_norms_command
from .rnn import add_command as add_rnn_command
from .rnn import bench_rnn

__all__ = ["compare", "ratios", "machine", "format_table", "CLOCKS", "bench_norms", "bench_rnn",
           "bench_cells", "bench_bn_lstm", "NORM_KINDS", "NORM_SHAPES", "STAT_SHAPES",
           "gradient_growth", "GROWTH_MODELS", "add_commands"]


def add_commands(sub) -> None:
    """Register ``layernorm bench norms``, ``layernorm bench rnn`` and ``layernorm bench
    growth``."""
    p = sub.add_parser("bench", help="speed benchmarks (ratios against torch in the same run); "
                                     "the gradient's growth with the sequence length")
    bsub = p.add_subparsers(dest="bench", required=True)
    add_norms_command(bsub)
    add_rnn_command(bsub)
    add_growth_command(bsub)
