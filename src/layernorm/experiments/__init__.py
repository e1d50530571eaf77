"""Experiments: typed configs, registries of models and named experiments, and ``train``.

    from layernorm.experiments import Config, train
    train(Config(dataset="digits", model="mlp", norm="layer", batch_size=32, epochs=2), "runs/x")

See docs/runner.md for the run directory layout and how to register models and experiments.
"""
from __future__ import annotations

from .config import Config
from .registry import (EXPERIMENT_MODULES, EXPERIMENTS, MODELS, PRESETS, Experiment, build_model,
                       get_experiment, load_registered, register_experiment, register_model)
from .training import (METRIC_KEYS, RunDirError, Runtime, check_run_dir, evaluate, load_checkpoint,
                    read_metrics, train)

__all__ = ["Config", "EXPERIMENT_MODULES", "EXPERIMENTS", "MODELS", "PRESETS", "Experiment",
           "build_model", "get_experiment", "load_registered", "register_experiment",
           "register_model", "METRIC_KEYS", "RunDirError", "Runtime", "check_run_dir", "evaluate",
           "load_checkpoint", "read_metrics", "train"]
