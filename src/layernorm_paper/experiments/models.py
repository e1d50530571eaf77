"""Model builders shared by experiments. Each takes (dataset, norm, **model_args)."""
from __future__ import annotations

from torch import nn

from layernorm.norms import norm_block
from .registry import register_model


def _norm_kwargs(norm: str, unbiased: bool) -> dict:
    # The paper normalized with the unbiased variance for batch norm at small batch sizes.
    return {"unbiased": unbiased} if norm == "batch" else {}


@register_model("mlp")
def mlp(dataset, norm: str, hidden: tuple[int, ...] | list[int] = (1000, 1000),
        unbiased: bool = False, activation: str = "relu") -> nn.Sequential:
    """Fully connected input-hidden...-output. Every hidden layer is ``norm_block(Linear, norm)``
    followed by the activation; the logits are never normalized (paper section 6.6)."""
    acts = {"relu": nn.ReLU, "tanh": nn.Tanh}
    if activation not in acts:
        raise ValueError(f"mlp activation must be one of {sorted(acts)}, received {activation!r}.")
    width = 1
    for d in dataset.input_shape:
        width *= d
    layers: list[nn.Module] = [nn.Flatten()]
    for h in hidden:
        layers += [norm_block(nn.Linear(width, h), norm, **_norm_kwargs(norm, unbiased)),
                   acts[activation]()]
        width = h
    layers.append(nn.Linear(width, dataset.output_size))
    return nn.Sequential(*layers)
