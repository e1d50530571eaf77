"""Experiments: typed configs, registries of models and named experiments, and ``train``.

    from layernorm_paper.experiments import Config, train
    train(Config(dataset="digits", model="mlp", norm="layer", batch_size=32, epochs=2), "runs/x")

Layers: ``config`` (and ``names``), ``registry``, ``rundir`` (the run directory), ``runtime``
(torchrun), ``training`` (the loop), ``runner`` (many configs), ``builtin`` (the runner's example:
the mlp builder and digits_mlp). See docs/runner.md for the layout and how to
register models and experiments; importing ``layernorm_paper.reproduce`` registers every
experiment of the reproduction.
"""
from __future__ import annotations

from . import builtin  # noqa: F401  (the runner's own: the mlp builder, digits_mlp)
from .config import Config
from .names import check_name
from .registry import (EXPERIMENTS, MODEL_NORMS, MODELS, SCALES, Experiment, build_model,
                       get_experiment, register_experiment, register_model)
from .rundir import (METRIC_KEYS, MetricsError, RunDirError, check_run_dir, load_checkpoint,
                     read_metrics)
from .runtime import Runtime
from .training import evaluate, train

__all__ = ["Config", "EXPERIMENTS", "MODEL_NORMS", "MODELS", "SCALES", "Experiment",
           "build_model", "check_name", "get_experiment", "register_experiment", "register_model",
           "METRIC_KEYS", "MetricsError", "RunDirError", "Runtime", "check_run_dir", "evaluate",
           "load_checkpoint", "read_metrics", "train"]
