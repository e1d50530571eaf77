"""Model builders shared by experiments. Each takes (dataset, norm, **model_args)."""
from __future__ import annotations

from torch import nn

from ..models.mlp import mlp_layers
from .registry import register_model


def _norm_kwargs(norm: str, unbiased: bool) -> dict:
    # The paper normalized with the unbiased variance for batch norm at small batch sizes.
    return {"unbiased": unbiased} if norm == "batch" else {}


@register_model("mlp")
def mlp(dataset, norm: str, hidden: tuple[int, ...] | list[int] = (1000, 1000),
        unbiased: bool = False, activation: str = "relu") -> nn.Sequential:
    """Fully connected input-hidden...-output. Every hidden layer is ``norm_block(Linear, norm)``
    followed by the activation; the logits are never normalized (paper section 6.6)."""
    width = 1
    for d in dataset.input_shape:
        width *= d
    return nn.Sequential(nn.Flatten(), *mlp_layers(width, hidden, dataset.output_size, norm,
                                                   activation=activation,
                                                   **_norm_kwargs(norm, unbiased)))
