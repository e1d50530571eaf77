"""layernorm: the reference implementation of Layer Normalization (Ba, Kiros, Hinton 2016)."""
from . import functional
from .norms import (NORMS, BatchNorm, ConvLayerNorm, LayerNorm, RMSNorm, make_norm, norm_block,
                    weight_norm)

__version__ = "0.1.0"

__all__ = [
    "functional", "NORMS", "BatchNorm", "ConvLayerNorm", "LayerNorm", "RMSNorm", "make_norm",
    "norm_block", "weight_norm", "__version__",
]
