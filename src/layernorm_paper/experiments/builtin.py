"""The runner's own example: the ``mlp`` model builder and the ``digits_mlp`` experiment (the
paper's experiments and their models register when ``layernorm_paper.reproduce`` is imported)."""
from __future__ import annotations

from torch import nn

from ..models.mlp import batch_kwargs, mlp_layers
from .config import Config
from .registry import register_experiment, register_model


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
                                                   **batch_kwargs(norm, unbiased)))


@register_experiment("digits_mlp", section="example",
                     claim="the runner's example: an MLP on the digits over norms and batch sizes "
                           "4 and 128 (the paper's section 6.6 is judged by mlp_batch_size)")
def digits_mlp(scale: str) -> list[Config]:
    norms = {"tiny": ("layer", "batch"), "quick": ("none", "batch", "layer"),
             "full": ("none", "batch", "layer", "weight", "rms")}[scale]
    batches = {"tiny": (32,), "quick": (4, 128), "full": (4, 128)}[scale]
    seeds = {"tiny": (0,), "quick": (0,), "full": (0, 1, 2)}[scale]
    hidden = {"tiny": [32], "quick": [128, 128], "full": [256, 256]}[scale]
    length = {"tiny": {"steps": 20, "eval_every": 10}, "quick": {"epochs": 3},
              "full": {"epochs": 20}}[scale]
    return [Config(dataset="digits", model="mlp", norm=norm, batch_size=bs, seed=seed, lr=1e-3,
                   model_args={"hidden": hidden, "unbiased": bs < 16}, **length)
            for norm in norms for bs in batches for seed in seeds]
