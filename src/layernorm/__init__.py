"""layernorm: the reference implementation of Layer Normalization (Ba, Kiros, Hinton 2016)."""
from . import functional
from .norms import (NORMS, BatchNorm, ConvLayerNorm, LayerNorm, RMSNorm, make_norm, norm_block,
                    weight_norm)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .precise_bn import recompute_batch_stats

__version__ = "0.1.0"

__all__ = [
    "functional", "NORMS", "BatchNorm", "ConvLayerNorm", "LayerNorm", "RMSNorm", "make_norm",
    "norm_block", "weight_norm", "__version__",
    "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "recompute_batch_stats",
]
