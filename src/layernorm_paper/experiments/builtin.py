"""Built-in experiments of the runner itself (the paper's experiments live with `reproduce`)."""
from __future__ import annotations

from . import models  # noqa: F401  (registers the shared model builders)
from .config import Config
from .registry import register_experiment


@register_experiment("digits_mlp", section="example",
                     claim="the runner's example: an MLP on the digits over norms and batch sizes "
                           "4 and 128 (the paper's section 6.6 is judged by mlp_batch_size)")
def digits_mlp(preset: str) -> list[Config]:
    norms = {"tiny": ("layer", "batch"), "quick": ("none", "batch", "layer"),
             "full": ("none", "batch", "layer", "weight", "rms")}[preset]
    batches = {"tiny": (32,), "quick": (4, 128), "full": (4, 128)}[preset]
    seeds = {"tiny": (0,), "quick": (0,), "full": (0, 1, 2)}[preset]
    hidden = {"tiny": [32], "quick": [128, 128], "full": [256, 256]}[preset]
    length = {"tiny": {"steps": 20, "eval_every": 10}, "quick": {"epochs": 3},
              "full": {"epochs": 20}}[preset]
    return [Config(dataset="digits", model="mlp", norm=norm, batch_size=bs, seed=seed, lr=1e-3,
                   model_args={"hidden": hidden, "unbiased": bs < 16}, **length)
            for norm in norms for bs in batches for seed in seeds]
